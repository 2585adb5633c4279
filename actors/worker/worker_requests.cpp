// The worker's pushes and pulls, through its bucket_client (actors/client): what a push to each
// bucket carries, where the answers go, and how a bucket that is gone is found again (the
// coordinator names its successor).
// worker_parts.hpp says who calls what.
#include "actors/transport/server_links.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "actors/worker/worker_parts.hpp"
#include "actors/worker/worker_setup.hpp"
#include "troupe/error.hpp"

namespace troupe::worker_detail {

namespace {

// What the values of bucket b's pull do: they went into st.params where they belong; the rows
// go to the chunk's rows, and once every bucket's are in the worker computes.
bucket_client::values_handler on_values(self_ptr self, const worker_config& config, size_t b) {
  return [=](pull_reply& reply) {
    auto& st = self->state;
    if (auto err = fill_rows(st.tables, reply.rows, st.rows))
      return fail(self, config, "reading rows from bucket " + std::to_string(b), err);
    if (--st.pulls_pending > 0) return;
    st.have_params = true;
    maybe_compute(self, config);
  };
}

bucket_client::failure_handler on_pull_failed(self_ptr self, const worker_config& config,
                                              size_t b) {
  return [=](bucket_failure f) {
    fail(self, config, (f.refused ? "pulling bucket " : "reaching bucket ") + std::to_string(b),
         f.error);
  };
}

// Where bucket b's values go: straight into st.params, only the slices of its plan (under
// --mode diloco into the values the next round starts from, merged once all are in).
value_place values_of(self_ptr self, size_t b) {
  return [self, b](const dense_tensor& t) {
    auto& st = self->state;
    auto& into = st.rounds ? st.rounds->start : st.params;
    return place_of(*st.layout, st.job->layout.buckets[b], t, into);
  };
}

bucket_client::ack_handler on_ack(self_ptr self, const worker_config& config) {
  return [=](const push_ack& ack) {
    auto& st = self->state;
    st.chunk_staleness += double(ack.staleness), ++st.chunk_acks;
    if (--st.pushes_pending == 0) pushed(self, config);
  };
}

bucket_client::failure_handler on_push_failed(self_ptr self, const worker_config& config,
                                              size_t b) {
  return [=](bucket_failure f) {
    if (!f.refused)
      return fail(self, config, "bucket " + std::to_string(b) + " keeps failing", f.error);
    // A refused push loses one gradient, not the job.
    config.log.warn("bucket {} refused our push: {}", b, describe(f.error));
    if (--self->state.pushes_pending == 0) pushed(self, config);
  };
}

// The push's dense gradient where it is (st.grad stays as it is until every bucket has
// acknowledged, so a resend carries the same values); none when it carries no gradient.
gradient_views gradient_of(const worker_state& st, size_t b, const push_request& push) {
  if (!pushes_gradient(st, push)) return std::nullopt;
  return views(*st.layout, st.job->layout.buckets[b], st.grad);
}

// A worker's pushes and pulls in flight at most: a few buckets' messages (each at most 8 MiB),
// whatever the model's size; enough to keep every server busy. Held pulls wait for pushes the
// workers send before them (push_round), so the window never holds a round back.
constexpr size_t requests_in_flight = 16;

}  // namespace

std::shared_ptr<bucket_client> connect_buckets(self_ptr self, const worker_config& config,
                                               std::vector<bucket_actor> buckets,
                                               const std::vector<endpoint>& servers) {
  bucket_client_config c;
  c.buckets = std::move(buckets);
  connect_to_servers(self->system(), servers, config.lane_secret, config.request_timeout,
                     config.log, c.lanes, "its pushes and pulls");
  c.timeout = config.request_timeout;
  c.log = config.log;
  c.monitor = true;
  c.window = requests_in_flight;
  c.count_bytes = [self](double out, double in) {
    add(self->state.metrics.bytes_out, out);
    add(self->state.metrics.bytes_in, in);
  };
  c.find_again = [self, config](size_t b, const bucket_actor& failed, const caf::error&,
                                auto found) {
    ask_where_bucket_is<coordinator_actor>(self, config.coordinator, config.request_timeout, b,
                                           failed, found);
  };
  return bucket_client::make(self, std::move(c));
}

namespace {

// Whether the next values are asked for behind this round's pushes: a bucket handles one
// sender's messages in order, so its pull reply already holds the push, and the step saves a
// round trip. (Rows need the next chunk, and --prefetch pulls before computing instead.) Not
// behind the worker's last push.
bool pulls_behind(const worker_state& st) {
  const bool last = st.queue.empty() && st.exhausted;
  return !last && st.tables.empty() && !st.job->prefetch;
}

}  // namespace

void begin_pushes(self_ptr self, const worker_config& config) {
  auto& st = self->state;
  record_activity(self, config, st.current, "push");
  st.pushes_pending = st.buckets->size();
  st.chunk_staleness = 0;
  st.chunk_acks = 0;
  if (pulls_behind(st)) st.pulls_pending = st.buckets->size();
}

namespace {

// Pushes buckets [first, end) of the current chunk, from st.grad.
void push_buckets(self_ptr self, const worker_config& config, bool skipped, size_t first,
                  size_t end) {
  auto& st = self->state;
  const bool last = st.queue.empty() && st.exhausted;
  // A pair's push is answered with its pull, so pairs only go where no bucket holds a pull
  // (async): a held pull would hold the push's ack, and with it a pause that waits for the ack.
  const bool pull_behind = pulls_behind(st);
  const bool paired = pull_behind && !st.job->pulls_held;
  for (size_t b = first; b < end; ++b) {
    const auto& plan = st.job->layout.buckets[b];
    auto push = std::make_shared<push_request>(
        push_request{plan.bucket, st.job->worker, st.clock, st.buckets->read_clock(b)});
    push->last = last;
    push->skipped = skipped;
    push->batches = st.current;  // a bucket applies these batches once, whoever pushes them
    if (st.rounds) push->storage = push_storage(*st.rounds);
    if (skipped)
      ;  // no tensors: the bucket counts the step only
    else if (st.job->compress_signs)
      push->signs = compress_gradient(st, plan);
    // (dense: sent from st.grad where it is)
    if (!st.tables.empty())
      push->sparse = row_gradients(st.tables, st.rows, static_cast<uint32_t>(b),
                                   static_cast<uint32_t>(st.buckets->size()));
    auto grad = gradient_of(st, b, *push);
    if (paired) {
      st.buckets->push_then_pull(b, std::move(push), std::move(grad),
                                 pull_request{plan.bucket, st.job->worker, st.clock + 1},
                                 values_of(self, b), on_ack(self, config),
                                 on_values(self, config, b), on_push_failed(self, config, b),
                                 on_pull_failed(self, config, b));
      continue;
    }
    st.buckets->push(b, std::move(push), std::move(grad), on_ack(self, config),
                     on_push_failed(self, config, b));
    if (pull_behind)
      st.buckets->pull(b, pull_request{plan.bucket, st.job->worker, st.clock + 1},
                       values_of(self, b), on_values(self, config, b),
                       on_pull_failed(self, config, b));
  }
}

}  // namespace

void push_round(self_ptr self, const worker_config& config, bool skipped) {
  begin_pushes(self, config);
  push_buckets(self, config, skipped, 0, self->state.buckets->size());
}

void push_fragment(self_ptr self, const worker_config& config, uint32_t k) {
  auto& st = self->state;
  auto& r = *st.rounds;
  r.pushed_bytes += take_pseudo_gradient(r, *st.layout, st.job->layout, k, st.params, st.grad);
  push_buckets(self, config, false, r.fragments[k].first, r.fragments[k].second);
}

// Pulls every bucket's values and, for models with embedding tables, the rows the chunk at the
// front of the queue reads.
void pull_round(self_ptr self, const worker_config& config, uint64_t ahead) {
  auto& st = self->state;
  record_activity(self, config, st.queue.empty() ? st.current : st.queue.front(), "pull");
  const auto buckets = static_cast<uint32_t>(st.buckets->size());
  st.pulls_pending = buckets;
  if (!st.tables.empty()) prepare_chunk_rows(*st.replica, st.tables, st.queue.front(), st.rows);
  for (uint32_t b = 0; b < buckets; ++b) {
    pull_request request{st.job->layout.buckets[b].bucket, st.job->worker, st.clock + ahead};
    if (!st.tables.empty()) request.rows = row_requests(st.tables, st.rows, b, buckets);
    st.buckets->pull(b, std::move(request), values_of(self, b), on_values(self, config, b),
                     on_pull_failed(self, config, b));
  }
}

}  // namespace troupe::worker_detail
