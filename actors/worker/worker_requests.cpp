// The worker's requests to its buckets: pushes and pulls over the bucket node's data lane
// (actors/lane) or over CAF, each tracked in flight so that a bucket that goes (restarted, its
// server lost, a backup promoted) has it sent again to its successor. worker_parts.hpp says
// who calls what.
#include "actors/lane/lane_client.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "actors/worker/worker_parts.hpp"
#include "actors/worker/worker_setup.hpp"
#include "troupe/error.hpp"

#include <functional>
#include <optional>

namespace troupe::worker_detail {

namespace {

// Attempts at one pull or push whose bucket keeps failing before the worker gives up.
constexpr int max_attempts = 5;

// Bucket b did not answer (it restarted, or its server was lost): asks the coordinator for its
// current handle (held there until it differs from `failed`), then calls `retry`.
void find_again(self_ptr self, const worker_config& config, size_t b, const bucket_actor& failed,
                int attempt, const caf::error& why, std::function<void()> retry) {
  if (attempt >= max_attempts)
    return fail(self, config, "bucket " + std::to_string(b) + " keeps failing", why);
  config.log.warn("bucket {} did not answer ({}); asking the coordinator where it is now", b,
                  describe(why));
  self->request(config.coordinator->handle(), config.request_timeout, which_atom_v,
                static_cast<uint32_t>(b), failed)
      .then(
          [=](bucket_actor& now) {
            self->monitor(now);
            self->state.buckets[b] = std::move(now);
            retry();
          },
          [=](caf::error& err) {
            if (!wait_for_standby(config, err))
              return fail(self, config, "finding bucket " + std::to_string(b), err);
            self->state.after_rejoin.push_back(
                [=] { find_again(self, config, b, failed, attempt, why, retry); });
          });
}

// Whether a failed request lost its bucket (as opposed to the bucket refusing the message):
// it went down, or a backup took its place.
bool bucket_gone(const caf::error& err) {
  return err.category() != error_category || err.code() == static_cast<uint8_t>(errc::not_primary);
}

// Records request `op` to bucket b as in flight; `lost` runs if its bucket goes first.
uint64_t track(self_ptr self, std::vector<in_flight>& ops, size_t b, const bucket_actor& target,
               std::function<void(const caf::error&)> lost) {
  const uint64_t id = ++self->state.requests;
  ops[b] = in_flight{id, target, std::move(lost)};
  return id;
}

// True (and the entry cleared) when request `id` is still the one in flight for bucket b.
bool settle(std::vector<in_flight>& ops, size_t b, uint64_t id) {
  if (ops[b].id != id) return false;
  ops[b] = in_flight{};
  return true;
}

// What the answer to a push or pull does.
struct answer_handlers {
  std::function<void(const wire&)> reply;
  std::function<void(caf::error&)> error;
};

// Records bucket b's push as in flight and returns what its answer does; none when the bucket
// is known to be down (the push then goes to its successor instead).
std::optional<answer_handlers> expect_ack(self_ptr self, const worker_config& config, size_t b,
                                          std::shared_ptr<push_request> push, int attempt) {
  auto& st = self->state;
  const auto target = st.buckets[b];
  auto lost = [=](const caf::error& err) {
    push->resend = true;  // it may have landed before the bucket went
    find_again(self, config, b, target, attempt + 1, err,
               [=] { send_push(self, config, b, push, attempt + 1); });
  };
  if (st.gone[b] == target.address()) {  // a request to it would only time out
    lost(make_error(errc::job_failed, "the bucket's actor is down"));
    return std::nullopt;
  }
  const uint64_t id = track(self, st.pushes, b, target, lost);
  auto acked = [=](const wire& w) {
    auto& st = self->state;
    if (!settle(st.pushes, b, id)) return;
    if (auto ack = decode<push_ack>(w))
      st.chunk_staleness += double(ack->staleness), ++st.chunk_acks;
    if (--st.pushes_pending == 0) pushed(self, config);
  };
  auto refused = [=](caf::error& err) {
    if (!settle(self->state.pushes, b, id)) return;
    if (bucket_gone(err)) return lost(err);
    // A refused push loses one gradient, not the job.
    config.log.warn("bucket {} refused our push: {}", b, describe(err));
    if (--self->state.pushes_pending == 0) pushed(self, config);
  };
  return answer_handlers{acked, refused};
}

// The data lane that carries bucket b's push with its gradient from where it is, if any.
lane_link* lane_for_gradient(worker_state& st, const caf::node_id& self_node, size_t b,
                             const push_request& push) {
  const auto& target = st.buckets[b];
  if (target.node() == self_node || !pushes_gradient(st, push)) return nullptr;
  return st.lanes.find(target.node());
}

void send_pull(self_ptr self, const worker_config& config, size_t b, pull_request request,
               int attempt);

// Records bucket b's pull as in flight and returns what its answer does (the values go straight
// into st.params); none when the bucket is known to be down (the pull then goes to its
// successor instead).
std::optional<answer_handlers> expect_values(self_ptr self, const worker_config& config, size_t b,
                                             const pull_request& request, int attempt) {
  auto& st = self->state;
  const auto target = st.buckets[b];
  auto lost = [=](const caf::error& err) {
    find_again(self, config, b, target, attempt + 1, err,
               [=] { send_pull(self, config, b, request, attempt + 1); });
  };
  if (st.gone[b] == target.address()) {
    lost(make_error(errc::job_failed, "the bucket's actor is down"));
    return std::nullopt;
  }
  const uint64_t id = track(self, st.pulls, b, target, lost);
  auto pulled = [=](const wire& w) {
    auto& st = self->state;
    if (!settle(st.pulls, b, id)) return;
    add(st.metrics.bytes_in, double(bytes_of(w).size()));
    // Straight into st.params: only the slices of this bucket's plan are taken.
    const auto& plan = st.job->layout.buckets[b];
    auto reply = decode_pull_into(
        w, [&](const dense_tensor& t) { return place_of(*st.layout, plan, t, st.params); });
    if (!reply)
      return fail(self, config, "reading the values of bucket " + std::to_string(b), reply.error());
    if (auto err = fill_rows(st.tables, reply->rows, st.rows))
      return fail(self, config, "reading rows from bucket " + std::to_string(b), err);
    st.read_clocks[b] = std::move(reply->clock);
    if (--st.pulls_pending > 0) return;
    st.have_params = true;
    maybe_compute(self, config);
  };
  auto failed = [=](caf::error& err) {
    if (!settle(self->state.pulls, b, id)) return;
    if (!bucket_gone(err)) return fail(self, config, "pulling bucket " + std::to_string(b), err);
    lost(err);
  };
  return answer_handlers{pulled, failed};
}

void send_pull(self_ptr self, const worker_config& config, size_t b, pull_request request,
               int attempt) {
  auto on = expect_values(self, config, b, request, attempt);
  if (!on) return;
  const auto& target = self->state.buckets[b];
  ask_bucket(self, self->state.lanes, target, config.request_timeout, pull_atom_v,
             encode_for(target.node() == self->node(), request), on->reply, on->error);
}

}  // namespace

void send_push(self_ptr self, const worker_config& config, size_t b,
               std::shared_ptr<push_request> push, int attempt) {
  auto on = expect_ack(self, config, b, push, attempt);
  if (!on) return;
  auto& st = self->state;
  if (auto* link = lane_for_gradient(st, self->node(), b, *push)) {
    size_t bytes = 0;
    push_over_lane(self, st, b, *push, *link, bytes).then(on->reply, on->error);
    add(st.metrics.bytes_out, double(bytes));
    return;
  }
  const bool in_process = st.buckets[b].node() == self->node();
  wire bytes = push_wire(st, b, *push, in_process);
  add(st.metrics.bytes_out, double(bytes.bytes.size()));
  ask_bucket(self, st.lanes, st.buckets[b], config.request_timeout, push_atom_v, std::move(bytes),
             on->reply, on->error);
}

void send_push_and_pull(self_ptr self, const worker_config& config, size_t b,
                        std::shared_ptr<push_request> push, pull_request request, bool as_pair) {
  auto& st = self->state;
  auto* link = as_pair ? lane_for_gradient(st, self->node(), b, *push) : nullptr;
  if (!link || st.gone[b] == st.buckets[b].address()) {
    send_push(self, config, b, push, 0);
    return send_pull(self, config, b, std::move(request), 0);
  }
  auto on_ack = expect_ack(self, config, b, push, 0);
  auto on_values = expect_values(self, config, b, request, 0);
  if (!on_ack || !on_values) return;  // not while the bucket is up (the check above)
  size_t bytes = 0;
  auto [acked, pulled] = push_and_pull_over_lane(self, st, b, *push, encode(request), *link, bytes);
  acked.then(on_ack->reply, on_ack->error);
  pulled.then(on_values->reply, on_values->error);
  add(st.metrics.bytes_out, double(bytes));
}

// A bucket's actor is gone (its node lost, or it crashed): requests in flight to it go again.
// (A data lane that ended fails its own requests, and CAF carries that node's messages.)
void on_bucket_down(self_ptr self, const caf::down_msg& msg) {
  auto& st = self->state;
  for (size_t b = 0; b < st.buckets.size(); ++b)
    if (st.buckets[b].address() == msg.source) st.gone[b] = msg.source;
  for (auto* ops : {&st.pulls, &st.pushes})
    for (auto& op : *ops)
      if (op.id != 0 && op.target.address() == msg.source) {
        auto lost = std::move(op.lost);
        op = in_flight{};
        lost(msg.reason);
      }
}

// Pulls every bucket's values and, for models with embedding tables, the rows the chunk at the
// front of the queue reads.
void pull_round(self_ptr self, const worker_config& config, uint64_t ahead) {
  auto& st = self->state;
  st.pulls_pending = st.buckets.size();
  const auto buckets = static_cast<uint32_t>(st.buckets.size());
  if (!st.tables.empty()) prepare_chunk_rows(*st.replica, st.tables, st.queue.front(), st.rows);
  for (size_t b = 0; b < st.buckets.size(); ++b) {
    const auto& plan = st.job->layout.buckets[b];
    pull_request request{plan.bucket, st.job->worker, st.clock + ahead};
    if (!st.tables.empty())
      request.rows = row_requests(st.tables, st.rows, static_cast<uint32_t>(b), buckets);
    send_pull(self, config, b, std::move(request), 0);
  }
}

}  // namespace troupe::worker_detail
