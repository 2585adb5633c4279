#include "actors/dp/plan/dp_plan.hpp"
#include "actors/dp/plan/dp_plan_parts.hpp"

#include <fmt/format.h>

#include <random>

#include "actors/dp/collective/rendezvous_store.hpp"
#include "actors/dp/collective/two_level.hpp"
#include "actors/dp/plan/generation_ranks.hpp"
#include "actors/dp/trainer/dp_schedule.hpp"
#include "actors/records/report.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_plan {

size_t live_count(const coordinator_state& st) {
  return size_t(std::count_if(st.dp->members.begin(), st.dp->members.end(),
                              [](const dp_member& m) { return !m.lost; }));
}

// The member that sent the message being handled, if it is one.
dp_member* sender(self_ptr self) {
  const auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (!from) return nullptr;  // anonymous: not a member (nor one yet to rejoin)
  for (auto& m : self->state.dp->members)
    if (m.handle.address() == from) return &m;
  return nullptr;
}

// A member declared lost that speaks again is told to stop (once): it is not part of the
// group any more, and its process exits non-zero saying why.
void refuse(self_ptr self, const job_config& config, dp_member& m) {
  if (m.refused) return;
  m.refused = true;
  config.log.warn("'{}' was declared lost and spoke again: stopping it", m.name);
  self->request(m.handle, config.opts.request_timeout, stop_atom_v,
                std::string("this worker was declared lost and may not rejoin the job"))
      .then([](bool) {}, [](caf::error&) {});
}

void maybe_finish(self_ptr self, const job_config& config) {
  auto& st = self->state;
  if (st.shell.finishing() || st.shell.succession.rejoining ||
      st.dp->evaluated < config.opts.epochs)
    return;
  if (!std::all_of(st.dp->members.begin(), st.dp->members.end(),
                   [](const dp_member& m) { return m.lost || m.done; }))
    return;
  finish_job(self, config);
}

// -- forming the group --------------------------------------------------------------------------

// The compression flags, every default resolved against the job's `steps`.
dp_compression compression_of(const launch_options& o, uint64_t steps) {
  dp_compression c;
  c.dtype = o.dp.dtype;
  c.skip = o.dp.compress_skip;
  c.adam = o.dp.adam;
  c.freeze_step = o.dp.freeze_step ? o.dp.freeze_step : std::max<uint64_t>(1, steps * 15 / 100);
  c.var_freeze_step = o.dp.var_freeze_step ? o.dp.var_freeze_step : c.freeze_step;
  c.var_update_scaler = o.dp.var_update_scaler;
  c.local_step_scaler =
      o.dp.local_step_scaler ? o.dp.local_step_scaler : std::max<uint64_t>(1, steps / 20);
  c.local_step_clipper = o.dp.local_step_clipper;
  return c;
}

namespace {

// Sends the checkpoint's model state to member `handle` a part at a time: its bucket 0, and
// with sharded state `start` (the start that follows, whose cut the member fills) and then the
// pieces of its bucket 1; after the last, `then` (its start). A member that does not answer
// is lost, and its start too.
void restore_member(self_ptr self, const job_config& config, dp_worker_actor handle,
                    std::shared_ptr<const saved_checkpoint> saved, wire start,
                    std::function<void()> then) {
  const uint64_t step = saved->job.step;
  const auto timeout = config.opts.request_timeout;
  auto failed = [=](const caf::error& err) {
    config.log.warn("the checkpoint's state did not reach a member: {}", describe(err));
  };
  auto pieces = [=] {
    if (saved->job.zero_stage == 0) return then();
    const uint32_t total = saved->parts(1) + 1;
    self->request(handle, timeout, pieces_atom_v, step, uint32_t{0}, total, start)
        .then(
            [=](bool) {
              send_saved_parts(
                  self, saved, 1,
                  [=](uint32_t index, uint32_t, wire part) {
                    return self->request(handle, timeout, pieces_atom_v, step, index + 1, total,
                                         std::move(part));
                  },
                  then, failed);
            },
            failed);
  };
  send_saved_parts(
      self, saved, 0,
      [=](uint32_t index, uint32_t total, wire part) {
        return self->request(handle, timeout, restore_atom_v, step, index, total, std::move(part));
      },
      pieces, failed);
}

}  // namespace

// A new generation of the live members: ranks in join order, a token each, the store and
// pending checksums of the last generation dropped.
void form_group(self_ptr self, const job_config& config, const std::string& why) {
  auto& st = self->state;
  const auto& o = config.opts;
  ++st.dp->generation;
  abandon_checkpoint(self, config, "the group formed again meanwhile");
  st.dp->store.reset();
  st.dp->checksums.clear();
  if (!st.shell.started.has_value()) {
    st.shell.phase = job_phase::training;
    st.shell.started = std::chrono::steady_clock::now();
    st.dp->epoch_loss.assign(o.epochs, 0.0);
    st.dp->epoch_examples.assign(o.epochs, 0);
    st.dp->applied_examples.assign(o.epochs, 0);
    st.dp->snapshot_taken.assign(o.epochs, false);
    st.dp->global_batch = o.batch * o.accumulate * static_cast<uint32_t>(st.dp->members.size());
    st.dp->steps_per_epoch =
        dp_steps_per_epoch(config.task->batches_per_epoch(1), st.dp->global_batch);
    if (st.dp->resume_from)
      if (auto err = take_resume(st, config)) return fail_job(self, config, describe(err));
  }
  const auto size = static_cast<uint32_t>(live_count(st));
  const auto live = [](const dp_member& m) { return !m.lost; };
  const bool fits = two_level_fits(live_hosts(st.dp->members, live));
  const bool two_level = o.dp.reduction == reduction_kind::two_level
                             ? fits
                             : o.dp.reduction == reduction_kind::automatic && fits;
  if (o.dp.reduction == reduction_kind::two_level && !fits)
    config.log.warn(
        "generation {}: the hosts' member counts do not allow two-level reduction; flat",
        st.dp->generation);
  config.log.info("generation {} ({}): {} workers, {} examples per step over {}{}",
                  st.dp->generation, why, size, st.dp->global_batch, to_string(o.dp.collective),
                  two_level ? ", two-level" : "");
  set(st.dp->group_metrics.generation, double(st.dp->generation));
  // A generation of other members is progress; the same members formed again after a failed
  // collective are not (one stuck in user code would have them re-form for good).
  std::vector<std::string> members;
  for (const auto& m : st.dp->members)
    if (!m.lost) members.push_back(m.name);
  if (members != st.dp->generation_members) st.shell.stall.progress(stall_watch::clock::now());
  st.dp->generation_members = std::move(members);
  set(st.dp->group_metrics.members, double(size));
  set(st.shell.metrics.workers, double(size));
  // --resume: member 0 goes on from the checkpoint (the others from it, by sync); with
  // sharded state every member gets the parameters and fills its own pieces.
  std::shared_ptr<const saved_checkpoint> saved;
  if (st.dp->resume_from) {
    saved = std::make_shared<const saved_checkpoint>(std::move(*st.dp->resume_from));
    st.dp->resume_from.reset();
  }
  for (auto& [member, start] : rank_generation(st.dp->members, live, st.dp->generation)) {
    auto& m = *member;
    m.done = false;
    start.epochs = o.epochs;
    start.global_batch = st.dp->global_batch;
    start.seed = o.seed;
    start.optimizer = optimizer_from(o);
    start.bucket_bytes = static_cast<uint64_t>(o.dp.bucket_mb * double(1 << 20));
    start.overlap = o.dp.overlap;
    start.checksum_every = o.dp.checksum_every;
    start.collective = o.dp.collective;
    start.checkpoint_every = checkpoint_interval(o, st.dp->steps_per_epoch);
    start.two_level = two_level;
    start.compression = compression_of(o, st.dp->steps_per_epoch * o.epochs);
    start.accumulate = o.accumulate;
    start.balance = o.dp.balance;
    start.zero_stage = o.dp.zero_stage;
    start.shard_backups = o.dp.shard_backups;
    if (auto it = o.dp.worker_slowdown.find(m.index); it != o.dp.worker_slowdown.end())
      start.slowdown = it->second;
    if (auto it = o.worker_delay_ms.find(m.index); it != o.worker_delay_ms.end())
      start.delay_ms = it->second;
    start.timeout_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(o.request_timeout).count());
    start.client = m.index;
    auto handle = m.handle;
    auto go = [=, w = encode(start)] {
      if (config.opts.hybrid())
        self->send(handle, tables_atom_v, self->state.ps->directory.buckets,
                   ps_plan::server_list(self->state));
      self->send(handle, start_atom_v, w);
    };
    if (saved && (m.rank == 0 || o.dp.zero_stage > 0)) {  // before its start
      restore_member(self, config, handle, saved, encode(start), go);
    } else {
      go();
    }
  }
  send_standing(self, config);
}

caf::result<wire> admit(self_ptr self, const job_config& config, const wire& w,
                        dp_worker_actor handle) {
  auto& st = self->state;
  auto request = decode<join_request>(w);
  if (!request) return std::move(request.error());
  if (request->sender != role::worker)
    return make_error(errc::bad_configuration, "a data-parallel job has workers only");
  if (st.shell.succession.rejoining)
    return make_error(errc::not_rejoined, "a takeover is under way: join again in a moment");
  for (const auto& m : st.dp->members)
    if (m.name == request->name || m.handle == handle)
      return make_error(errc::bad_configuration,
                        fmt::format("a worker named '{}' has already {}", request->name,
                                    m.lost ? "been lost by this job" : "joined"));
  const size_t room = st.shell.started.has_value()
                          ? std::max(config.opts.workers, config.opts.max_workers)
                          : config.opts.workers;
  if (live_count(st) >= room || st.dp->members.size() >= (1u << 16))
    return make_error(errc::job_failed, fmt::format("the job already has its {} workers", room));
  self->monitor(handle);
  expect_heartbeats(self, request->name, handle.node());
  st.dp->members.push_back(dp_member{request->name, std::move(handle)});
  st.dp->members.back().index = static_cast<uint32_t>(st.dp->members.size() - 1);
  st.dp->members.back().host = request->host_label.empty() ? request->name : request->host_label;
  const auto live = static_cast<uint32_t>(live_count(st));
  config.log.info("worker '{}' joined ({} of {})", request->name, live, config.opts.workers);
  if (st.shell.started.has_value())
    form_group(self, config, "'" + request->name + "' joined");
  else if (live == config.opts.workers && (!config.opts.hybrid() || ps_plan::tables_ready(st)))
    form_group(self, config, "start");
  return encode(join_reply{live - 1, config.opts.workers, 0, st.shell.succession.term});
}

void record_loss(coordinator_state& st, dp_member& m, const std::string& why) {
  m.lost = true;
  st.shell.beats.forget(m.name);
  st.shell.report.losses.push_back(
      loss_event{m.name, role::worker, st.shell.training_s(), unix_ms_now(), why});
  st.shell.report.workers_lost.push_back(m.name);
  add(st.shell.metrics.lost, 1);
}

void lose(self_ptr self, const job_config& config, const std::string& name,
          const std::string& why) {
  auto& st = self->state;
  if (st.shell.finishing()) return;
  auto it = std::find_if(st.dp->members.begin(), st.dp->members.end(),
                         [&](const dp_member& m) { return m.name == name && !m.lost; });
  if (it == st.dp->members.end()) return;
  forget_member(self, name);
  if (!st.shell.started.has_value()) {
    config.log.warn("'{}' left before the job started", name);
    st.dp->members.erase(it);
    return;
  }
  record_loss(st, *it, why);
  if (live_count(st) == 0)
    return fail_job(self, config, "every worker was lost; the last, '" + name + "': " + why);
  abandon_tables_save(self, config,
                      make_error(errc::job_failed, "worker '" + name + "' was lost meanwhile"));
  close_open_steps(self, config);
  open_checkpoint_when_settled(self, config);
  const auto& o = config.opts;
  if (o.dp.zero_stage > 0 && o.dp.shard_backups == 0 && st.dp->steps > 0) {
    auto step = go_back_to_checkpoint(self, config);
    if (!step)
      return fail_job(self, config,
                      fmt::format("lost worker '{}' ({}), and its pieces of the sharded "
                                  "optimizer state with it (--shard-backups 0 keeps no copy), "
                                  "and {}",
                                  name, why, describe(step.error())));
    config.log.warn(
        "lost worker '{}' ({}), and its pieces of the sharded optimizer state with it "
        "(--shard-backups 0 keeps no copy); the others go back to the checkpoint after step {}",
        name, why, *step);
  } else {
    config.log.warn("lost worker '{}' ({}); the others go on without it", name, why);
  }
  if (st.shell.succession.rejoining) return;  // the takeover's end forms the next generation
  if (!st.dp->lost_at) st.dp->lost_at = std::chrono::steady_clock::now();
  form_group(self, config, "'" + name + "' lost");
}

void on_broken(self_ptr self, const job_config& config, uint64_t generation,
               const std::string& why) {
  auto* m = sender(self);
  if (!m) return;
  if (m->lost) return refuse(self, config, *m);
  if (generation != self->state.dp->generation || self->state.shell.finishing()) return;
  config.log.warn("'{}': a collective of generation {} failed ({})", m->name, generation, why);
  // A loss explains most failures and re-forms at once; give detection its time.
  self->delayed_send(self, config.opts.heartbeat_timeout, tick_atom_v, generation);
}

void on_broken_tick(self_ptr self, const job_config& config, uint64_t generation) {
  auto& st = self->state;
  if (!sent_by(self, self->address()) || generation != st.dp->generation || st.shell.finishing() ||
      st.shell.succession.rejoining)
    return;
  form_group(self, config, "a collective failed with every member alive");
}

}  // namespace troupe::dp_plan

namespace troupe {

void dp_state::fill_report(coordinator_self self, const job_config&) {
  auto& st = self->state;
  job_report& r = st.shell.report;
  r.steps = steps;
  r.wall_s = st.shell.wall_s();
  r.test_accuracy = r.epochs.empty() ? 0.0 : r.epochs.back().test_accuracy;
  r.generations = generation;
  r.overlap = r.allreduce_s > 0 ? std::clamp(1.0 - exposed_s / r.allreduce_s, 0.0, 1.0) : 0.0;
  r.workers.clear();
  for (const auto& m : members) {
    r.workers.push_back(worker_entry{m.name, m.steps, m.wall_s > 0 ? m.compute_s / m.wall_s : 0, 0,
                                     m.skipped_steps});
    r.workers.back().batch_share =
        m.step_examples ? double(m.examples) / double(m.step_examples) : 0;
    r.workers.back().peak_rss_mb =
        peak_rss_mb(st.shell, m.name, m.handle && m.handle.node() == self->node());
  }
  for (auto& e : r.epochs)
    e.examples = e.epoch - 1 < applied_examples.size() ? applied_examples[e.epoch - 1] : 0;
}

bool dp_state::heard(coordinator_self self, const job_config& config, const heartbeat& beat) {
  bool ours = false;
  for (auto& m : members) {
    if (m.name != beat.name) continue;
    if (m.lost) {  // declared lost, yet it speaks: it is told to stop
      dp_plan::refuse(self, config, m);
      continue;
    }
    m.presence.take(beat);
    ours = true;
  }
  return ours;
}

void dp_state::silent(coordinator_self self, const job_config& config, const std::string& name,
                      const std::string& why) {
  dp_plan::lose(self, config, name, why);
}

bool dp_state::busy() const {
  return evaluating;
}

void dp_state::activity(std::vector<heard_activity>& out) const {
  for (const auto& m : members)
    if (!m.lost) out.push_back(m.presence.last());
}

void dp_state::live_members(std::vector<caf::actor>& out) const {
  for (const auto& m : members)
    if (!m.lost) out.push_back(caf::actor_cast<caf::actor>(m.handle));
}

void dp_state::wind_up(coordinator_self, const job_config&, std::function<void()> then) {
  then();
}

std::string dp_state::summary(const job_report& r) const {
  return fmt::format("allreduce {:.1f} MB in {:.2f} s (overlap {:.2f})",
                     double(r.allreduce_bytes) / 1e6, r.allreduce_s, r.overlap);
}

}  // namespace troupe
