#include "actors/worker/worker.hpp"
#include "actors/job/timing.hpp"
#include "actors/supervision/node_control.hpp"
#include "kernels/cpu/vector_ops.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

#include <caf/io/middleman.hpp>

#include "actors/supervision/guards.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "actors/worker/worker_setup.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using self_ptr = worker_actor::stateful_pointer<worker_state>;

// `ahead`: 1 for a prefetch issued before this worker's push of the current chunk.
void pull_round(self_ptr self, const worker_config& config, uint64_t ahead = 0);
void maybe_compute(self_ptr self, const worker_config& config);

void fail(self_ptr self, const worker_config& config, caf::error err) {
  config.log.error("stopping: {}", describe(err));
  self->quit(std::move(err));
}

// Fails with what we were doing in front of the reason, e.g. "pushing to bucket 3: ...".
void fail(self_ptr self, const worker_config& config, const std::string& doing,
          const caf::error& err) {
  fail(self, config, make_error(errc::job_failed, doing + ": " + describe(err)));
}

// Whether a failed request to the coordinator may be retried once this worker rejoins a
// standby that takes over (the coordinator did not refuse it: it went, or did not answer).
bool wait_for_standby(const worker_config& config, const caf::error& err) {
  return config.coordinator->standby_listed() &&
         (err.category() != error_category || has_code(err, errc::not_rejoined));
}

// Keeps claim_below chunks in reserve, so that the next claim's round trip hides behind
// computation; each claim asks for up to lease_chunks.
void claim_work(self_ptr self, const worker_config& config) {
  auto& st = self->state;
  // Paused (a checkpoint, a drain): no new work, which a drained worker could not finish.
  // Rejoining a standby that takes over: it hands out work once it knows what we did.
  if (st.claim_pending || st.exhausted || st.paused || st.rejoining ||
      st.queue.size() >= claim_below)
    return;
  st.claim_pending = true;
  const auto to = config.coordinator->handle();
  self->request(to, config.request_timeout, claim_atom_v, st.job->worker, lease_chunks)
      .then(
          [=](const wire& w) {
            auto& st = self->state;
            if (to != config.coordinator->handle()) return;  // a deposed coordinator's chunks
            st.claim_pending = false;
            auto lease = decode<work_lease>(w);
            if (!lease) return fail(self, config, "claiming work", lease.error());
            if (lease->chunks.empty())
              st.exhausted = true;
            else
              st.queue.insert(st.queue.end(), lease->chunks.begin(), lease->chunks.end());
            claim_work(self, config);
            maybe_compute(self, config);
          },
          [=](caf::error& err) {
            if (to != config.coordinator->handle()) return;  // rejoining reset claim_pending
            if (!wait_for_standby(config, err)) return fail(self, config, "claiming work", err);
            config.log.warn("claiming work: {}; waiting for the coordinator", describe(err));
            self->state.claim_pending = false;  // claimed again once rejoined
          });
}

// Sends the coordinator the finished chunks it has not heard of yet, in one message.
void report_progress(self_ptr self, const worker_config& config) {
  auto& st = self->state;
  if (st.unreported.empty()) return;
  self->send(config.coordinator->handle(), progress_atom_v,
             encode(progress_batch{std::move(st.unreported)}));
  st.unreported.clear();
}

// Once every bucket acknowledged a push: the clock advances and the chunk is finished; its
// progress goes out with the next batch of reports (report_every, report_within), or at once
// when no claimed work is left to go on with.
void pushed(self_ptr self, const worker_config& config) {
  auto& st = self->state;
  ++st.clock;
  const double staleness = st.chunk_acks ? st.chunk_staleness / double(st.chunk_acks) : 0.0;
  const auto now = std::chrono::steady_clock::now();
  if (st.unreported.empty()) st.unreported_since = now;
  st.unreported.push_back(progress{st.job->worker, st.current, st.current_loss, st.compute_s,
                                   seconds_since(st.started), staleness, st.clock});
  st.reported.push_back(st.current);
  st.reported_loss.push_back(st.current_loss);
  st.current_reported = true;
  if (st.unreported.size() >= report_every || now - st.unreported_since >= report_within ||
      st.queue.empty())
    report_progress(self, config);
  maybe_compute(self, config);
}

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

void send_push(self_ptr self, const worker_config& config, size_t b,
               std::shared_ptr<push_request> push, int attempt);

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

void send_pull(self_ptr self, const worker_config& config, size_t b, pull_request request,
               int attempt);
std::optional<answer_handlers> expect_values(self_ptr self, const worker_config& config, size_t b,
                                             const pull_request& request, int attempt);

// Bucket b's push and the pull of the values after it: over the bucket's data lane as one pair
// of frames (one write each way, lane_link::send_pair), each on its own otherwise.
void send_push_and_pull(self_ptr self, const worker_config& config, size_t b,
                        std::shared_ptr<push_request> push, pull_request request) {
  auto& st = self->state;
  auto* link = lane_for_gradient(st, self->node(), b, *push);
  if (!link || st.gone[b] == st.buckets[b].address()) {
    send_push(self, config, b, push, 0);
    return send_pull(self, config, b, std::move(request), 0);
  }
  auto on_ack = expect_ack(self, config, b, push, 0);
  auto on_values = expect_values(self, config, b, request, 0);
  size_t bytes = 0;
  auto [acked, pulled] = push_and_pull_over_lane(self, st, b, *push, encode(request), *link, bytes);
  acked.then(on_ack->reply, on_ack->error);
  pulled.then(on_values->reply, on_values->error);
  add(st.metrics.bytes_out, double(bytes));
}

void push_round(self_ptr self, const worker_config& config, bool skipped) {
  auto& st = self->state;
  st.pushes_pending = st.buckets.size();
  st.chunk_staleness = 0;
  st.chunk_acks = 0;
  const bool last = st.queue.empty() && st.exhausted;
  // The next values are asked for at once, behind each push: a bucket handles one sender's
  // messages in order, so its pull reply already holds this push, and the step saves a round
  // trip. (Rows need the next chunk, and --prefetch pulls before computing instead.)
  const bool pull_behind = !last && st.tables.empty() && !st.job->prefetch;
  if (pull_behind) st.pulls_pending = st.buckets.size();
  for (size_t b = 0; b < st.buckets.size(); ++b) {
    const auto& plan = st.job->layout.buckets[b];
    auto push = std::make_shared<push_request>(
        push_request{plan.bucket, st.job->worker, st.clock, st.read_clocks[b]});
    push->last = last;
    push->skipped = skipped;
    if (skipped)
      ;  // no tensors: the bucket counts the step only
    else if (st.job->compress_signs)
      push->signs = compress_gradient(st, plan);
    // (dense: push_wire() reads st.grad when the push is sent)
    if (!st.tables.empty())
      push->sparse = row_gradients(st.tables, st.rows, static_cast<uint32_t>(b),
                                   static_cast<uint32_t>(st.buckets.size()));
    if (pull_behind)
      send_push_and_pull(self, config, b, std::move(push),
                         pull_request{plan.bucket, st.job->worker, st.clock + 1});
    else
      send_push(self, config, b, std::move(push), 0);
  }
}

// Averages the gradients of the chunk's batches into st.grad; returns their summed loss, or
// the task's error.
caf::expected<double> compute_chunk(worker_state& st, const work_chunk& chunk) {
  double loss_sum = 0;
  std::fill(st.grad.begin(), st.grad.end(), 0.0f);
  for (uint32_t i = 0; i < chunk.count; ++i) {
    const auto began = std::chrono::steady_clock::now();
    auto& target = chunk.count == 1 ? st.grad : st.batch_grad;
    if (target.size() != st.grad.size()) target.assign(st.grad.size(), 0.0f);
    auto loss =
        st.tables.empty()
            ? st.replica->gradient(st.params, chunk.epoch, chunk.first + i, target)
            : st.replica->gradient(st.params, st.rows, chunk.epoch, chunk.first + i, target);
    if (!loss) return std::move(loss.error());
    loss_sum += *loss;
    if (chunk.count > 1)
      for (size_t k = 0; k < st.grad.size(); ++k) st.grad[k] += target[k] / chunk.count;
    if (st.job->delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(st.job->delay_ms));
    st.compute_s += seconds_since(began);
  }
  if (chunk.count > 1)  // row gradients were added up over the chunk's batches
    for (auto& g : st.rows.grads)
      for (float& x : g) x /= static_cast<float>(chunk.count);
  return loss_sum;
}

// Moves the loop on: says done when no work is left, pulls when values are missing, and
// computes and pushes the next chunk once its values are in and no push is in flight.
void maybe_compute(self_ptr self, const worker_config& config) {
  auto& st = self->state;
  if (st.pushes_pending > 0) return;
  if (st.paused) {                  // nothing in flight: the coordinator may take its checkpoint
    report_progress(self, config);  // before the answer: the checkpoint counts these as done
    for (auto& p : st.pauses) p.deliver(true);
    st.pauses.clear();
    return;
  }
  if (st.queue.empty()) {
    if (st.exhausted && !st.finished) {
      report_progress(self, config);
      st.finished = true;
      self->send(config.coordinator->handle(), done_atom_v, st.job->worker);
    }
    return;  // otherwise a claim is on its way
  }
  if (!st.have_params) {
    if (st.pulls_pending == 0) pull_round(self, config);
    return;
  }
  st.have_params = false;
  st.current = st.queue.front();
  st.current_reported = false;
  st.queue.pop_front();
  claim_work(self, config);
  // A prefetch asks for the values after this chunk's own push (clock + 1): ssp and bsp hold
  // it until that push has landed, so prefetching never loosens their bounds.
  if (st.job->prefetch && (!st.queue.empty() || !st.exhausted)) pull_round(self, config, 1);
  auto loss = compute_chunk(st, st.current);
  if (!loss)
    return fail(self, config,
                fmt::format("the task's gradient of epoch {} batch {}", st.current.epoch + 1,
                            st.current.first),
                loss.error());
  st.current_loss = *loss;
  add(st.metrics.steps, st.current.count);
  set(st.metrics.loss, st.current_loss / std::max<uint32_t>(st.current.count, 1));
  bool finite = std::isfinite(st.current_loss) && kernels::all_finite(st.grad);
  for (const auto& g : st.rows.grads) finite = finite && kernels::all_finite(g);
  if (!finite)  // never send a poisoned gradient: the buckets only count the step
    config.log.warn("non-finite loss or gradient in epoch {} batch {}; nothing pushed",
                    st.current.epoch + 1, st.current.first);
  push_round(self, config, !finite);
}

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
    add(st.metrics.bytes_in, double(w.bytes.size()));
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

void start(self_ptr self, const worker_config& config, const wire& w,
           std::vector<bucket_actor> buckets) {
  auto& st = self->state;
  auto job = decode<start_job>(w);
  if (!job) return fail(self, config, std::move(job.error()));
  if (buckets.size() != job->layout.buckets.size())
    return fail(self, config, make_error(errc::malformed_message, "bucket handles do not match"));
  st.layout.emplace(config.task->parameters());
  if (auto err = validate_plan(*st.layout, job->layout))
    return fail(self, config, "checking the coordinator's placement against our model", err);
  auto replica = config.task->make_replica(job->batch, job->seed);
  if (!replica) return fail(self, config, std::move(replica.error()));
  st.params.assign(st.layout->total, 0.0f);
  st.grad.assign(st.layout->total, 0.0f);
  st.residual.assign(job->compress_signs ? st.layout->total : 0, 0.0f);
  st.read_clocks.assign(buckets.size(), vector_clock{});
  st.replica = std::move(*replica);
  st.buckets = std::move(buckets);
  st.pulls.assign(st.buckets.size(), in_flight{});
  st.pushes.assign(st.buckets.size(), in_flight{});
  st.gone.assign(st.buckets.size(), caf::actor_addr{});
  for (const auto& bucket : st.buckets) self->monitor(bucket);
  st.lanes = connect_servers(self->system(), config, job->servers);
  if (config.share_cores && job->workers_on_host > 0) config.share_cores(job->workers_on_host);
  st.job = std::move(*job);
  st.clock = st.job->clock;
  st.tables = config.task->sparse_tables();
  if (!st.tables.empty() && st.job->prefetch) {
    config.log.warn("--prefetch is not supported with embedding tables; pulling in turn");
    st.job->prefetch = false;
  }
  st.started = std::chrono::steady_clock::now();
  config.log.info("training: worker {} of {}", st.job->worker, st.job->workers);
  claim_work(self, config);
  if (st.tables.empty()) pull_round(self, config);  // rows need a chunk: pull once it comes
}

// This process's coordinator watch found the coordinator of `term` (a standby that took over):
// the worker registers again, saying where it is, and goes on once it is accepted. Term 0: no
// coordinator is left.
void rejoin(self_ptr self, const worker_config& config, uint64_t term) {
  if (!self->current_sender() || self->current_sender()->node() != self->node()) return;
  auto& st = self->state;
  if (term == 0 || !st.job)
    return fail(self, config, make_error(errc::job_failed, "lost the coordinator"));
  const auto request = rejoin_request_of(st, config);
  const auto coordinator = config.coordinator->handle();
  self->monitor(coordinator);
  st.rejoining = true;
  st.claim_pending = false;  // a claim still out went to the lost coordinator
  st.unreported.clear();     // the request names them among the finished chunks
  self->request(coordinator, config.request_timeout, rejoin_atom_v, encode(request),
                caf::actor_cast<worker_actor>(self))
      .then(
          [=](const wire&) {
            auto& st = self->state;
            st.rejoining = false;
            // A pause (a checkpoint, a drain) of the lost coordinator ends with it.
            st.paused = false;
            for (auto& p : st.pauses) p.deliver(true);
            st.pauses.clear();
            config.log.info("rejoined the coordinator of term {}", term);
            auto waiting = std::move(st.after_rejoin);
            st.after_rejoin.clear();
            for (auto& f : waiting) f();
            claim_work(self, config);
            maybe_compute(self, config);
          },
          [=](caf::error& err) { fail(self, config, "rejoining the coordinator", err); });
}

}  // namespace

worker_actor::behavior_type worker(worker_actor::stateful_pointer<worker_state> self,
                                   worker_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  self->state.metrics = worker_metrics::of(config.metrics, config.name);
  self->monitor(config.coordinator->handle());
  config.coordinator->subscribe(self->address());
  self->set_down_handler([=](caf::down_msg& msg) {
    if (self->state.stopping) return;
    if (msg.source != config.coordinator->address()) return on_bucket_down(self, msg);
    if (config.coordinator->standby_listed())
      return config.log.warn("lost the coordinator ({}); waiting for its standby",
                             describe(msg.reason));
    fail(self, config, make_error(errc::job_failed, "lost the coordinator"));
  });
  const join_request request{role::worker, config.name, static_cast<uint32_t>(::getpid()),
                             endpoint{}, config.host_label};
  self->request(config.coordinator->handle(), config.request_timeout, join_atom_v, encode(request),
                caf::actor_cast<worker_actor>(self))
      .then(
          [=](const wire& w) {
            config.coordinator->joined(w);
            config.log.debug("joined the coordinator");
          },
          [=](caf::error& err) { fail(self, config, "joining the coordinator", err); });
  return {
      [=](rejoin_atom, uint64_t term) { rejoin(self, config, term); },
      [=](start_atom, const wire& w, std::vector<bucket_actor> buckets) {
        if (!sent_by(self, config.coordinator->address()))
          return config.log.warn("ignored a start that is not from the coordinator");
        if (self->state.job) return config.log.warn("ignored a second start");
        start(self, config, w, std::move(buckets));
      },
      [=](stop_atom, const std::string& failure) {
        if (sent_by(self, config.coordinator->address())) config.coordinator->close();
        return stop_on_request(self, config.coordinator->address(), failure, "worker");
      },
      [=](pause_atom) -> caf::result<bool> {
        auto& st = self->state;
        if (!sent_by(self, config.coordinator->address()))
          return make_error(errc::authentication_failed, "only the coordinator pauses a worker");
        st.paused = true;
        if (st.pushes_pending == 0) {
          report_progress(self, config);  // before the answer: a checkpoint counts these as done
          return true;
        }
        st.pauses.push_back(self->make_response_promise<bool>());
        return st.pauses.back();
      },
      [=](resume_atom) {
        if (!sent_by(self, config.coordinator->address())) return;
        auto& st = self->state;
        st.paused = false;
        for (auto& p : st.pauses) p.deliver(true);  // whoever paused has given up waiting
        st.pauses.clear();
        if (!st.job) return;
        claim_work(self, config);
        maybe_compute(self, config);
      },
      [=](fault_atom) {
        crash_on_purpose(self, config.coordinator->address(), config.name, config.log);
      },
      [=](metrics_atom) {
        set(self->state.metrics.mailbox, double(self->mailbox().size()));
        return metrics_for(self, config.coordinator->address(), config.metrics);
      },
      [=](log_atom, const std::string& level) {
        set_level_from(self, config.coordinator->address(), level, config.log);
      },
  };
}

}  // namespace troupe
