// --mode hybrid, a member's side of the tables: before a step it pulls the embedding rows its
// share of the examples reads from the buckets that own them (as the table client the
// coordinator numbered it: its join index), and once the step is applied it pushes their
// gradients back, asynchronously, as a parameter-service worker does, named by the share's
// examples; the buckets apply them at once (a share at most once), with clipping and
// staleness counted by vector clock. A bucket that fails is looked up again
// through the coordinator (which asks the tables' coordinator) and asked again, a few times.
#include "actors/dp/dp_trainer_parts.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "troupe/error.hpp"
#include "troupe/net.hpp"
#include "troupe/options.hpp"

namespace troupe::dp_parts {

namespace {

constexpr int max_attempts = 4;

// Bucket b's copy `failed` did not answer: asks where bucket b is now (unless a new generation
// already named another copy), then runs `retry`; gives up (the trainer fails) after a few.
void find_again(self_ptr self, const dp_trainer_config& config, uint32_t b,
                const bucket_actor& failed, int attempt, const caf::error& why,
                std::function<void()> retry) {
  if (attempt >= max_attempts)
    return fail(self, config, "table bucket " + std::to_string(b) + " keeps failing", why);
  if (self->state.table_buckets[b] != failed) {
    config.log.info("table bucket {} did not answer ({}); asking the one named since", b,
                    describe(why));
    return retry();
  }
  config.log.warn("table bucket {} did not answer ({}); asking where it is now", b, describe(why));
  self->request(coordinator_of(config), config.request_timeout, which_atom_v, b, failed)
      .then(
          [=](bucket_actor& now) {
            self->state.table_buckets[b] = std::move(now);
            retry();
          },
          [=](caf::error& err) { fail(self, config, "finding table bucket", err); });
}

void pull_one(self_ptr self, const dp_trainer_config& config, uint32_t b, int attempt,
              std::shared_ptr<uint32_t> pending, std::function<void()> then) {
  auto& st = self->state;
  const auto buckets = static_cast<uint32_t>(st.table_buckets.size());
  pull_request request{b, st.job->client, st.step, row_requests(st.tables, st.rows, b, buckets)};
  const auto target = st.table_buckets[b];
  self->request(target, config.request_timeout, pull_atom_v,
                encode_for(target.node() == self->node(), request))
      .then(
          [=](const wire& w) {
            auto& st = self->state;
            auto reply = decode<pull_reply>(w);
            caf::error err =
                reply ? fill_rows(st.tables, reply->rows, st.rows) : std::move(reply.error());
            if (err) return fail(self, config, "reading the tables", err);
            st.read_clocks[b] = reply->clock;
            if (--*pending == 0) then();
          },
          [=](caf::error& err) {
            find_again(self, config, b, target, attempt + 1, err,
                       [=] { pull_one(self, config, b, attempt + 1, pending, then); });
          });
}

void push_one(self_ptr self, const dp_trainer_config& config, uint32_t b, int attempt,
              std::shared_ptr<const push_request> push) {
  auto& st = self->state;
  const auto target = st.table_buckets[b];
  self->request(target, config.request_timeout, push_atom_v,
                encode_for(target.node() == self->node(), *push))
      .then([=](const wire&) { table_push_done(self, config); },
            [=](caf::error& err) {
              if (has_code(err, errc::non_finite) || has_code(err, errc::shape_mismatch) ||
                  has_code(err, errc::malformed_message)) {
                config.log.warn("table bucket {} refused the rows: {}", b, describe(err));
                return table_push_done(self, config);  // counted as rejected there
              }
              auto again = std::make_shared<push_request>(*push);
              again->resend = true;
              find_again(self, config, b, target, attempt + 1, err,
                         [=] { push_one(self, config, b, attempt + 1, again); });
            });
}

}  // namespace

void connect_table_servers(self_ptr self, const dp_trainer_config& config,
                           const std::string& servers) {
  if (servers.empty()) return;  // embedded: the servers are in this process
  auto list = parse_host_list(servers);
  if (!list) return config.log.warn("ignored a malformed server list: {}", describe(list.error()));
  for (const auto& at : *list) {
    const std::string key = to_string(at);
    if (self->state.table_servers.count(key)) continue;
    auto node = net::connect(self->system(), at.host, at.port, config.request_timeout);
    if (!node) {
      config.log.warn(
          "no direct connection to the server at {} ({}); going through the "
          "coordinator",
          key, self->system().render(node.error()));
      continue;
    }
    self->state.table_servers.insert(key);
  }
}

void pull_share_rows(self_ptr self, const dp_trainer_config& config, example_range share,
                     uint32_t epoch, std::function<void()> then) {
  auto& st = self->state;
  st.rows = sparse_rows_view{};
  st.rows.ids = st.replica->rows_of_range(epoch, share.first, share.count);
  size_rows(st.tables, st.rows);
  const auto buckets = static_cast<uint32_t>(st.table_buckets.size());
  st.read_clocks.assign(buckets, vector_clock{});
  auto pending = std::make_shared<uint32_t>(buckets);
  for (uint32_t b = 0; b < buckets; ++b) pull_one(self, config, b, 0, pending, then);
}

void prepare_share_rows(dp_trainer_state& st, example_range share, uint32_t epoch) {
  const auto buckets = static_cast<uint32_t>(st.table_buckets.size());
  st.rows_step = st.step + 1;  // (run_step emptied rows_due)
  for (uint32_t b = 0; b < buckets; ++b) {
    auto push = std::make_shared<push_request>(
        push_request{b, st.job->client, st.step + 1, st.read_clocks[b]});
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
    push_one(self, config, b, 0, std::move(push));
  }
}

}  // namespace troupe::dp_parts
