// The worker's pulls and pushes, through its bucket_client (actors/client): where their answers
// go, and how a bucket that is gone is found again (the coordinator names its successor).
// worker_parts.hpp says who calls what.
#include "actors/worker/chunk_rows.hpp"
#include "actors/worker/worker_parts.hpp"
#include "actors/worker/worker_setup.hpp"
#include "troupe/error.hpp"

namespace troupe::worker_detail {

namespace {

// Asks the coordinator for bucket b's handle now (it answers once that differs from `failed`);
// while a standby takes over, asks it again once this worker has rejoined.
void ask_coordinator(self_ptr self, const worker_config& config, size_t b,
                     const bucket_actor& failed,
                     std::function<void(caf::expected<bucket_actor>)> found) {
  self->request(config.coordinator->handle(), config.request_timeout, which_atom_v,
                static_cast<uint32_t>(b), failed)
      .then([=](bucket_actor& now) { found(std::move(now)); },
            [=](caf::error& err) {
              if (!wait_for_standby(config, err)) return found(std::move(err));
              self->state.after_rejoin.push_back(
                  [=] { ask_coordinator(self, config, b, failed, found); });
            });
}

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

// Where bucket b's values go: straight into st.params, only the slices of its plan.
value_place values_of(self_ptr self, size_t b) {
  return [self, b](const dense_tensor& t) {
    auto& st = self->state;
    return place_of(*st.layout, st.job->layout.buckets[b], t, st.params);
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

}  // namespace

std::shared_ptr<bucket_client> connect_buckets(self_ptr self, const worker_config& config,
                                               std::vector<bucket_actor> buckets,
                                               const std::vector<endpoint>& servers) {
  bucket_client_config c;
  c.buckets = std::move(buckets);
  c.lanes = connect_servers(self->system(), config, servers);
  c.timeout = config.request_timeout;
  c.log = config.log;
  c.monitor = true;
  c.count_bytes = [self](double out, double in) {
    add(self->state.metrics.bytes_out, out);
    add(self->state.metrics.bytes_in, in);
  };
  c.find_again = [self, config](size_t b, const bucket_actor& failed, const caf::error&,
                                auto found) { ask_coordinator(self, config, b, failed, found); };
  return bucket_client::make(self, std::move(c));
}

void send_push(self_ptr self, const worker_config& config, size_t b,
               std::shared_ptr<push_request> push) {
  auto grad = gradient_of(self->state, b, *push);
  self->state.buckets->push(b, std::move(push), std::move(grad), on_ack(self, config),
                            on_push_failed(self, config, b));
}

void send_push_and_pull(self_ptr self, const worker_config& config, size_t b,
                        std::shared_ptr<push_request> push, pull_request request, bool as_pair) {
  if (!as_pair) {
    send_push(self, config, b, std::move(push));
    return self->state.buckets->pull(b, std::move(request), values_of(self, b),
                                     on_values(self, config, b), on_pull_failed(self, config, b));
  }
  auto grad = gradient_of(self->state, b, *push);
  self->state.buckets->push_then_pull(b, std::move(push), std::move(grad), std::move(request),
                                      values_of(self, b), on_ack(self, config),
                                      on_values(self, config, b), on_push_failed(self, config, b),
                                      on_pull_failed(self, config, b));
}

// Pulls every bucket's values and, for models with embedding tables, the rows the chunk at the
// front of the queue reads.
void pull_round(self_ptr self, const worker_config& config, uint64_t ahead) {
  auto& st = self->state;
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
