#include "actors/worker/worker.hpp"
#include "actors/records/timing.hpp"
#include "actors/supervision/node_control.hpp"
#include "actors/worker/worker_parts.hpp"
#include "kernels/cpu/vector_ops.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <thread>

#include <caf/io/middleman.hpp>

#include "actors/supervision/supervisors/guards.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "actors/worker/worker_setup.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace worker_detail {

void fail(self_ptr self, const worker_config& config, caf::error err) {
  config.log.error("stopping: {}", describe(err));
  self->quit(std::move(err));
}

// Fails with what we were doing in front of the reason, e.g. "pushing to bucket 3: ...".
void fail(self_ptr self, const worker_config& config, const std::string& doing,
          const caf::error& err) {
  fail(self, config, make_error(errc::job_failed, doing + ": " + describe(err)));
}

void record_activity(self_ptr, const worker_config& config, const work_chunk& chunk,
                     const char* waiting_on) {
  config.coordinator->activity().set(
      config.name, fmt::format("epoch {} batch {}", chunk.epoch + 1, chunk.first), waiting_on);
}

// Keeps claim_below chunks in reserve, so that the next claim's round trip hides behind
// computation; each claim asks for up to lease_chunks.
void claim_work(self_ptr self, const worker_config& config) {
  auto& st = self->state;
  // Paused (a checkpoint, a drain): no new work, which a drained worker could not finish.
  // Rejoining a standby that takes over: it hands out work once it knows what we did.
  // A round (--mode diloco) is many batches: one in reserve, one per claim, so that a slow
  // worker does not hold back batches a faster one could do.
  const size_t reserve = st.rounds ? 1 : claim_below;
  if (st.claim_pending || st.exhausted || st.paused || st.rejoining || st.queue.size() >= reserve)
    return;
  st.claim_pending = true;
  const auto to = config.coordinator->handle();
  self->request(to, config.request_timeout, claim_atom_v, st.job->worker,
                st.rounds ? 1u : lease_chunks)
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
            if (!waits_for_standby(*config.coordinator, err))
              return fail(self, config, "claiming work", err);
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
                                   seconds_since(st.started), staleness, st.clock,
                                   st.current_skipped, st.rounds ? st.rounds->pushed_bytes : 0});
  if (st.rounds) st.unreported.back().skipped_local = st.rounds->skipped;
  st.finished_steps += st.current.count;
  if (config.coordinator->standby_listed())
    st.reported.push_back({st.current, st.current_loss, st.clock});
  st.current_reported = true;
  if (st.unreported.size() >= report_every || now - st.unreported_since >= report_within ||
      st.queue.empty())
    report_progress(self, config);
  maybe_compute(self, config);
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

// Whether a step's loss and gradient are finite (rows included): a step that is not is never
// applied or pushed.
bool finite_step(const worker_state& st, double loss, const std::vector<float>& grad) {
  bool finite = std::isfinite(loss) && kernels::all_finite(grad);
  for (const auto& g : st.rows.grads) finite = finite && kernels::all_finite(g);
  return finite;
}

void warn_skipped(worker_state& st, const worker_config& config, const work_chunk& chunk,
                  uint64_t batch) {
  if (const uint64_t n = st.skip_warning.count(std::chrono::steady_clock::now()))
    config.log.warn(
        "non-finite loss or gradient in epoch {} batch {}; {} (skipped steps since the last "
        "warning: {})",
        chunk.epoch + 1, batch, st.rounds ? "the local step skipped" : "nothing pushed", n);
}

// --mode diloco: the current chunk's batches as local steps of the inner optimizer, each
// fragment pushed once its sync step is done (local_rounds.hpp); returns the summed loss of the
// steps taken (the round's mean for each skipped one), or the task's error.
caf::expected<double> compute_round(self_ptr self, const worker_config& config) {
  auto& st = self->state;
  auto& r = *st.rounds;
  const work_chunk chunk = st.current;
  begin_pushes(self, config);
  r.next_fragment = 0;
  r.skipped.clear();
  r.pushed_bytes = 0;
  st.batch_grad.resize(st.grad.size());
  double loss_sum = 0;
  const auto fragments = static_cast<uint32_t>(r.fragments.size());
  for (uint32_t i = 0; i < chunk.count; ++i) {
    const auto began = std::chrono::steady_clock::now();
    record_activity(self, config, chunk, "user code: gradient");
    auto loss = st.replica->gradient(st.params, chunk.epoch, chunk.first + i, st.batch_grad);
    if (!loss) return std::move(loss.error());
    if (finite_step(st, *loss, st.batch_grad)) {
      inner_step(r, st.params, st.batch_grad);
      loss_sum += *loss;
    } else {
      r.skipped.push_back(i);
      warn_skipped(st, config, chunk, chunk.first + i);
    }
    const double took = seconds_since(began);
    const double slower = (r.config.slowdown - 1) * took + st.job->delay_ms / 1000.0;
    if (slower > 0) std::this_thread::sleep_for(std::chrono::duration<double>(slower));
    st.compute_s += seconds_since(began);
    while (r.next_fragment < fragments &&
           sync_step(r.next_fragment, fragments, chunk.count) <= i + 1)
      push_fragment(self, config, r.next_fragment++);
  }
  record_activity(self, config, chunk, "push");  // the last fragment's pushes are in flight
  const auto taken = static_cast<uint32_t>(chunk.count - r.skipped.size());
  if (taken == 0) return std::numeric_limits<double>::quiet_NaN();
  return loss_sum * chunk.count / taken;
}

// --mode diloco: the values the round's pulls brought become the worker's (merge_pulled), then
// the current chunk runs as a round. Every fragment has been pushed when it returns.
void run_round(self_ptr self, const worker_config& config) {
  auto& st = self->state;
  merge_pulled(*st.rounds, *st.layout, st.job->layout, st.params);
  auto loss = compute_round(self, config);
  if (!loss)
    return fail(self, config,
                fmt::format("the task's gradient in the round of epoch {} batches {}-{}",
                            st.current.epoch + 1, st.current.first,
                            st.current.first + st.current.count - 1),
                loss.error());
  st.current_loss = *loss;
  st.current_skipped = st.rounds->skipped.size() == st.current.count;
  add(st.metrics.steps, st.current.count);
  if (!st.current_skipped)
    set(st.metrics.loss, st.current_loss / std::max<uint32_t>(st.current.count, 1));
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
    if (!st.exhausted)
      config.coordinator->activity().set(config.name, "between chunks", "coordinator: work");
    if (st.exhausted && !st.finished) {
      report_progress(self, config);
      config.coordinator->activity().set(config.name, "done", "the job's end");
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
  if (st.rounds) return run_round(self, config);
  // A prefetch asks for the values after this chunk's own push (clock + 1): ssp and bsp hold
  // it until that push has landed, so prefetching never loosens their bounds.
  if (st.job->prefetch && (!st.queue.empty() || !st.exhausted)) pull_round(self, config, 1);
  record_activity(self, config, st.current, "user code: gradient");
  auto loss = compute_chunk(st, st.current);
  if (!loss)
    return fail(self, config,
                fmt::format("the task's gradient of epoch {} batch {}", st.current.epoch + 1,
                            st.current.first),
                loss.error());
  st.current_loss = *loss;
  add(st.metrics.steps, st.current.count);
  set(st.metrics.loss, st.current_loss / std::max<uint32_t>(st.current.count, 1));
  const bool finite = finite_step(st, st.current_loss, st.grad);
  st.current_skipped = !finite;
  if (!finite)  // never send a poisoned gradient: the buckets only count the step
    warn_skipped(st, config, st.current, st.current.first);
  push_round(self, config, !finite);
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
  if (job->rounds) {
    if (!config.task->sparse_tables().empty())
      return fail(self, config,
                  make_error(errc::bad_configuration,
                             "--mode diloco takes no embedding tables (use --mode ps or hybrid)"));
    st.rounds.emplace(*job->rounds, st.layout->total,
                      static_cast<uint32_t>(job->layout.buckets.size()));
  }
  st.residual.assign(job->compress_signs ? st.layout->total : 0, 0.0f);
  st.replica = std::move(*replica);
  st.buckets = connect_buckets(self, config, std::move(buckets), job->servers);
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

}  // namespace worker_detail

using namespace worker_detail;

worker_actor::behavior_type worker(worker_actor::stateful_pointer<worker_state> self,
                                   worker_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  self->state.metrics = worker_metrics::of(config.metrics, config.name);
  self->monitor(config.coordinator->handle());
  config.coordinator->subscribe(self->address());
  self->attach_functor([link = config.coordinator, name = config.name] {
    link->activity().forget(name);  // an ended worker does nothing the stall report needs
  });
  self->set_down_handler([=](caf::down_msg& msg) {
    if (self->state.stopping) return;
    if (msg.source != config.coordinator->address()) {
      if (self->state.buckets) self->state.buckets->on_down(msg);
      return;
    }
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
      [=](state_atom, uint64_t held_through) {
        // The coordinator's standby holds our chunks through this clock: no rejoin needs them.
        auto& st = self->state;
        if (!sent_by(self, config.coordinator->address())) return;
        while (!st.reported.empty() && st.reported.front().clock <= held_through)
          st.reported.pop_front();
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
      [=](usage_atom) -> uint64_t { return current_process_usage().peak_rss_bytes; },
  };
}

}  // namespace troupe
