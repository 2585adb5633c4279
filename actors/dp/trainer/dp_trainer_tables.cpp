// --mode hybrid, a member's side of the tables: before a step it pulls the embedding rows its
// share of the examples reads from the buckets that own them (as the table client the
// coordinator numbered it: its join index), and once the step is applied it pushes their
// gradients back, asynchronously, as a parameter-service worker does, named by the share's
// examples; the buckets apply them at once (a share at most once), with clipping and
// staleness counted by vector clock. The requests go through a bucket_client (actors/client):
// a bucket that fails is looked up again through the coordinator (which asks the tables'
// coordinator) and asked again, a few times.
#include "actors/dp/trainer/dp_trainer_parts.hpp"
#include "actors/transport/server_links.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "troupe/error.hpp"
#include "troupe/options.hpp"

namespace troupe::dp_parts {

namespace {

constexpr int max_attempts = 4;

void pull_one(self_ptr self, const dp_trainer_config& config, uint32_t b,
              std::shared_ptr<uint32_t> pending, std::function<void()> then) {
  auto& st = self->state;
  const auto buckets = static_cast<uint32_t>(st.table_buckets->size());
  pull_request request{b, st.job->client, st.step, row_requests(st.tables, st.rows, b, buckets)};
  auto no_dense = [](const dense_tensor&) { return std::span<float>{}; };
  st.table_buckets->pull(
      b, std::move(request), no_dense,
      [=](pull_reply& reply) {
        if (auto err = fill_rows(self->state.tables, reply.rows, self->state.rows))
          return fail(self, config, "reading the tables", err);
        if (--*pending == 0) then();
      },
      [=](bucket_failure f) {
        fail(self, config, "reading table bucket " + std::to_string(b), f.error);
      });
}

void push_one(self_ptr self, const dp_trainer_config& config, uint32_t b,
              std::shared_ptr<push_request> push) {
  self->state.table_buckets->push(
      b, std::move(push), std::nullopt, [=](const push_ack&) { table_push_done(self, config); },
      [=](bucket_failure f) {
        if (!f.refused)
          return fail(self, config, "table bucket " + std::to_string(b) + " keeps failing",
                      f.error);
        config.log.warn("table bucket {} refused the rows: {}", b, describe(f.error));
        table_push_done(self, config);  // counted as rejected there
      });
}

}  // namespace

void use_table_buckets(self_ptr self, const dp_trainer_config& config,
                       std::vector<bucket_actor> buckets) {
  auto& st = self->state;
  if (st.table_buckets && st.table_buckets->size() == buckets.size()) {
    for (size_t b = 0; b < buckets.size(); ++b) st.table_buckets->set_bucket(b, buckets[b]);
    return;
  }
  bucket_client_config c;
  c.buckets = std::move(buckets);
  c.lanes = st.table_lanes;
  c.timeout = config.request_timeout;
  c.log = config.log;
  c.max_attempts = max_attempts;
  c.find_again = [self, config](size_t b, const bucket_actor& failed, const caf::error&,
                                auto found) {
    ask_where_bucket_is<dp_coordinator_actor>(self, config.coordinator, config.request_timeout, b,
                                              failed, found);
  };
  st.table_buckets = bucket_client::make(self, std::move(c));
}

void connect_table_servers(self_ptr self, const dp_trainer_config& config,
                           const std::string& servers) {
  if (servers.empty()) return;  // embedded: the servers are in this process
  auto list = parse_server_list(servers);
  if (!list) return config.log.warn("ignored a malformed server list: {}", describe(list.error()));
  auto& st = self->state;
  const auto key = [](const endpoint& at) { return to_string(host_port{at.host, at.port}); };
  std::vector<endpoint> fresh;  // (after a rejoin, only servers not connected to yet)
  for (const auto& at : *list)
    if (!st.table_servers.count(key(at))) fresh.push_back(at);
  for (const auto& at :
       connect_to_servers(self->system(), fresh, config.lane_secret, config.request_timeout,
                          config.log, st.table_lanes, "the tables' rows"))
    st.table_servers.insert(key(at));
}

void pull_share_rows(self_ptr self, const dp_trainer_config& config, example_range share,
                     uint32_t epoch, std::function<void()> then) {
  auto& st = self->state;
  st.rows = sparse_rows_view{};
  st.rows.ids = st.replica->rows_of_range(epoch, share.first, share.count);
  size_rows(st.tables, st.rows);
  const auto buckets = static_cast<uint32_t>(st.table_buckets->size());
  auto pending = std::make_shared<uint32_t>(buckets);
  for (uint32_t b = 0; b < buckets; ++b) pull_one(self, config, b, pending, then);
}

void prepare_share_rows(dp_trainer_state& st, example_range share, uint32_t epoch) {
  const auto buckets = static_cast<uint32_t>(st.table_buckets->size());
  st.rows_step = st.step + 1;  // (run_step emptied rows_due)
  for (uint32_t b = 0; b < buckets; ++b) {
    auto push = std::make_shared<push_request>(
        push_request{b, st.job->client, st.step + 1, st.table_buckets->read_clock(b)});
    push->sparse = row_gradients(st.tables, st.rows, b, buckets);
    push->batches = batch_range{epoch, share.first, static_cast<uint32_t>(share.count)};
    st.rows_due.push_back(std::move(push));
  }
}

void push_share_rows(self_ptr self, const dp_trainer_config& config, bool skipped) {
  auto& st = self->state;
  auto due = std::move(st.rows_due);
  st.rows_due.clear();
  for (auto& push : due) {
    if (skipped) {
      push->skipped = true;
      push->sparse.clear();
    }
    ++st.table_pushes_due;
    const uint32_t b = push->bucket;
    push_one(self, config, b, std::move(push));
  }
}

}  // namespace troupe::dp_parts
