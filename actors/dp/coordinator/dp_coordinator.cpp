#include "actors/dp/coordinator/dp_coordinator.hpp"
#include "actors/dp/coordinator/dp_coordinator_parts.hpp"

#include <fmt/format.h>

#include <random>

#include "actors/dp/collective/rendezvous_store.hpp"
#include "actors/dp/collective/two_level.hpp"
#include "actors/dp/coordinator/generation_ranks.hpp"
#include "actors/dp/trainer/dp_schedule.hpp"
#include "actors/records/report.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_coordination {

size_t live_count(const dp_coordinator_state& st) {
  return size_t(std::count_if(st.members.begin(), st.members.end(),
                              [](const dp_member& m) { return !m.lost; }));
}

// The member that sent the message being handled, if it is one.
dp_member* sender(self_ptr self) {
  const auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (!from) return nullptr;  // anonymous: not a member (nor one yet to rejoin)
  for (auto& m : self->state.members)
    if (m.handle.address() == from) return &m;
  return nullptr;
}

// A member declared lost that speaks again is told to stop (once): it is not part of the
// group any more, and its process exits non-zero saying why.
void refuse(self_ptr self, const dp_coordinator_config& config, dp_member& m) {
  if (m.refused) return;
  m.refused = true;
  config.log.warn("'{}' was declared lost and spoke again: stopping it", m.name);
  self->request(m.handle, config.opts.request_timeout, stop_atom_v,
                std::string("this worker was declared lost and may not rejoin the job"))
      .then([](bool) {}, [](caf::error&) {});
}

void fill_report(dp_coordinator_state& st) {
  job_report& r = st.shell.report;

  r.steps = st.steps;
  r.wall_s = st.shell.wall_s();
  r.test_accuracy = r.epochs.empty() ? 0.0 : r.epochs.back().test_accuracy;
  r.generations = st.generation;
  r.overlap = r.allreduce_s > 0 ? std::clamp(1.0 - st.exposed_s / r.allreduce_s, 0.0, 1.0) : 0.0;
  r.workers.clear();
  for (const auto& m : st.members) {
    r.workers.push_back(worker_entry{m.name, m.steps, m.wall_s > 0 ? m.compute_s / m.wall_s : 0, 0,
                                     m.skipped_steps});
    r.workers.back().batch_share =
        m.step_examples ? double(m.examples) / double(m.step_examples) : 0;
  }
  for (auto& e : r.epochs)
    e.examples = e.epoch - 1 < st.applied_examples.size() ? st.applied_examples[e.epoch - 1] : 0;
}

// Asks every member to stop, then quits with `reason` once all answered (or timed out).
void stop_all_and_quit(self_ptr self, const dp_coordinator_config& config, caf::error reason) {
  auto& st = self->state;
  st.shell.phase = job_phase::finishing;
  std::vector<caf::actor> members;
  for (const auto& m : st.members)
    if (!m.lost) members.push_back(caf::actor_cast<caf::actor>(m.handle));
  stop_members_then(self, members, stop_bound(st.shell, config.opts),
                    reason ? describe(reason) : std::string{},
                    [self, reason] { self->quit(reason); });
}

void fail(self_ptr self, const dp_coordinator_config& config, const std::string& why) {
  auto& st = self->state;
  if (st.shell.finishing()) return;
  if (defer_end_while_overdue(st.shell.succession, config.opts.takeover_timeout, why)) return;
  config.log.error("the job failed: {}", why);
  fill_report(st);
  st.shell.report.failure = why;
  write_report(st.shell, config.opts, config.log);
  if (config.tables) self->send(config.tables, stop_atom_v, why);
  release_follower(self, why);
  stop_all_and_quit(self, config, make_error(errc::job_failed, why));
}

void check_stall(self_ptr self, const dp_coordinator_config& config) {
  auto& st = self->state;
  if (st.shell.finishing()) return;
  // Start-up, an evaluation and a takeover may take long on purpose; each counts as progress
  // when it ends. (A checkpoint is written within the handler of its last part.)
  const bool busy = !st.shell.started.has_value() || st.evaluating || st.shell.succession.rejoining;
  std::vector<heard_activity> heard;
  for (const auto& m : st.members)
    if (!m.lost) heard.push_back(heard_activity{m.activity, m.heard});
  if (auto why = judge_stall(st.shell.stall, busy, config.activity.get(), heard, st.shell.report))
    fail(self, config, *why);
}

void maybe_finish(self_ptr self, const dp_coordinator_config& config) {
  auto& st = self->state;
  if (st.shell.finishing() || st.shell.succession.rejoining || st.evaluated < config.opts.epochs) return;
  if (!std::all_of(st.members.begin(), st.members.end(),
                   [](const dp_member& m) { return m.lost || m.done; }))
    return;
  if (defer_end_while_overdue(st.shell.succession, config.opts.takeover_timeout, std::nullopt)) return;
  st.shell.phase = job_phase::finishing;
  release_follower(self, {});  // before the statistics: the standby must not take over now
  auto end = [=] {
    auto& st = self->state;
    fill_report(st);
    write_report(st.shell, config.opts, config.log);
    const auto& r = st.shell.report;
    config.log.info(
        "done: test_accuracy {:.4f}, {} steps, {:.1f} s, {} skipped, allreduce {:.1f} MB in "
        "{:.2f} s (overlap {:.2f})",
        r.test_accuracy, r.steps, r.wall_s, r.skipped_steps, double(r.allreduce_bytes) / 1e6,
        r.allreduce_s, r.overlap);
    if (config.tables) self->send(config.tables, stop_atom_v, std::string{});
    stop_all_and_quit(self, config, caf::error{});
  };
  if (config.tables) return gather_table_stats(self, config, end);
  end();
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

// A new generation of the live members: ranks in join order, a token each, the store and
// pending checksums of the last generation dropped.
void form_group(self_ptr self, const dp_coordinator_config& config, const std::string& why) {
  auto& st = self->state;
  const auto& o = config.opts;
  ++st.generation;
  st.store.reset();
  st.checksums.clear();
  if (!st.shell.started.has_value()) {
    st.shell.phase = job_phase::training;
    st.shell.started = std::chrono::steady_clock::now();
    st.epoch_loss.assign(o.epochs, 0.0);
    st.epoch_examples.assign(o.epochs, 0);
    st.applied_examples.assign(o.epochs, 0);
    st.snapshot_taken.assign(o.epochs, false);
    st.global_batch = o.batch * o.accumulate * static_cast<uint32_t>(st.members.size());
    st.steps_per_epoch = dp_steps_per_epoch(config.task->batches_per_epoch(1), st.global_batch);
    if (st.resume_from)
      if (auto err = take_resume(st, config)) return fail(self, config, describe(err));
  }
  const auto size = static_cast<uint32_t>(live_count(st));
  const auto live = [](const dp_member& m) { return !m.lost; };
  const bool fits = two_level_fits(live_hosts(st.members, live));
  const bool two_level = o.dp.reduction == reduction_kind::two_level
                             ? fits
                             : o.dp.reduction == reduction_kind::automatic && fits;
  if (o.dp.reduction == reduction_kind::two_level && !fits)
    config.log.warn(
        "generation {}: the hosts' member counts do not allow two-level reduction; flat",
        st.generation);
  config.log.info("generation {} ({}): {} workers, {} examples per step over {}{}", st.generation,
                  why, size, st.global_batch, to_string(o.dp.collective),
                  two_level ? ", two-level" : "");
  set(st.group_metrics.generation, double(st.generation));
  // A generation of other members is progress; the same members formed again after a failed
  // collective are not (one stuck in user code would have them re-form for good).
  std::vector<std::string> members;
  for (const auto& m : st.members)
    if (!m.lost) members.push_back(m.name);
  if (members != st.generation_members) st.shell.stall.progress(stall_watch::clock::now());
  st.generation_members = std::move(members);
  set(st.group_metrics.members, double(size));
  set(st.shell.metrics.workers, double(size));
  for (auto& [member, start] : rank_generation(st.members, live, st.generation)) {
    auto& m = *member;
    m.done = false;
    start.epochs = o.epochs;
    start.global_batch = st.global_batch;
    start.seed = o.seed;
    start.optimizer = optimizer_from(o);
    start.bucket_bytes = static_cast<uint64_t>(o.dp.bucket_mb * double(1 << 20));
    start.overlap = o.dp.overlap;
    start.checksum_every = o.dp.checksum_every;
    start.collective = o.dp.collective;
    start.checkpoint_every = o.checkpoint_dir.empty()
                                 ? 0
                                 : (o.checkpoint_every ? o.checkpoint_every : st.steps_per_epoch);
    start.two_level = two_level;
    start.compression = compression_of(o, st.steps_per_epoch * o.epochs);
    start.accumulate = o.accumulate;
    start.balance = o.dp.balance;
    if (auto it = o.dp.worker_slowdown.find(m.index); it != o.dp.worker_slowdown.end())
      start.slowdown = it->second;
    if (auto it = o.worker_delay_ms.find(m.index); it != o.worker_delay_ms.end())
      start.delay_ms = it->second;
    start.timeout_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(o.request_timeout).count());
    if (st.resume_from && m.rank == 0) {  // before its start: it goes on from the checkpoint
      const auto& parts = st.resume_from->buckets[0];
      for (uint32_t i = 0; i < parts.size(); ++i)
        self->send(m.handle, restore_atom_v, st.resume_from->job.step, i,
                   static_cast<uint32_t>(parts.size()), parts[i]);
      st.resume_from.reset();
    }
    start.client = m.index;
    if (config.tables) self->send(m.handle, tables_atom_v, st.table_buckets, st.table_servers);
    self->send(m.handle, start_atom_v, encode(start));
  }
  send_standing(self, config);
}

caf::result<wire> admit(self_ptr self, const dp_coordinator_config& config, const wire& w,
                        dp_worker_actor handle) {
  auto& st = self->state;
  auto request = decode<join_request>(w);
  if (!request) return std::move(request.error());
  if (request->sender != role::worker)
    return make_error(errc::bad_configuration, "a data-parallel job has workers only");
  if (st.shell.succession.rejoining)
    return make_error(errc::not_rejoined, "a takeover is under way: join again in a moment");
  for (const auto& m : st.members)
    if (m.name == request->name || m.handle == handle)
      return make_error(errc::bad_configuration,
                        fmt::format("a worker named '{}' has already {}", request->name,
                                    m.lost ? "been lost by this job" : "joined"));
  const size_t room =
      st.shell.started.has_value() ? std::max(config.opts.workers, config.opts.max_workers) : config.opts.workers;
  if (live_count(st) >= room || st.members.size() >= (1u << 16))
    return make_error(errc::job_failed, fmt::format("the job already has its {} workers", room));
  self->monitor(handle);
  if (handle.node() != self->node()) st.beats.heard(request->name, heartbeat_monitor::clock::now());
  st.members.push_back(dp_member{request->name, std::move(handle)});
  st.members.back().index = static_cast<uint32_t>(st.members.size() - 1);
  st.members.back().host = request->host_label.empty() ? request->name : request->host_label;
  const auto live = static_cast<uint32_t>(live_count(st));
  config.log.info("worker '{}' joined ({} of {})", request->name, live, config.opts.workers);
  if (st.shell.started.has_value())
    form_group(self, config, "'" + request->name + "' joined");
  else if (live == config.opts.workers && (!config.tables || !st.table_buckets.empty()))
    form_group(self, config, "start");
  return encode(join_reply{live - 1, config.opts.workers, 0, st.shell.succession.term});
}

void record_loss(dp_coordinator_state& st, dp_member& m, const std::string& why) {
  m.lost = true;
  st.beats.forget(m.name);
  st.shell.report.losses.push_back(
      loss_event{m.name, role::worker, st.shell.training_s(), unix_ms_now(), why});
  st.shell.report.workers_lost.push_back(m.name);
  add(st.shell.metrics.lost, 1);
}

void lose(self_ptr self, const dp_coordinator_config& config, const std::string& name,
          const std::string& why) {
  auto& st = self->state;
  if (st.shell.finishing()) return;
  auto it = std::find_if(st.members.begin(), st.members.end(),
                         [&](const dp_member& m) { return m.name == name && !m.lost; });
  if (it == st.members.end()) return;
  st.beats.forget(name);
  if (!st.shell.started.has_value()) {
    config.log.warn("'{}' left before the job started", name);
    st.members.erase(it);
    return;
  }
  record_loss(st, *it, why);
  if (live_count(st) == 0)
    return fail(self, config, "every worker was lost; the last, '" + name + "': " + why);
  close_open_steps(self, config);
  config.log.warn("lost worker '{}' ({}); the others go on without it", name, why);
  if (st.shell.succession.rejoining) return;  // the takeover's end forms the next generation
  if (!st.lost_at) st.lost_at = std::chrono::steady_clock::now();
  form_group(self, config, "'" + name + "' lost");
}

// Every heartbeat interval: a takeover's deadline, the standing, then members not heard from
// within the timeout are lost. Members still to rejoin a takeover are judged by its deadline,
// and a primary that was paused with a standby following judges nobody until the standby has
// taken its standing again (it may have been deposed meanwhile).
void check_heartbeats(self_ptr self, const dp_coordinator_config& config) {
  auto& st = self->state;
  self->delayed_send(self, config.opts.heartbeat_interval, tick_atom_v);
  check_takeover(self, config);
  send_standing(self, config);
  take_deferred_end(
      st.shell.succession, config.opts.takeover_timeout,
      [=](const std::string& why) { fail(self, config, why); },
      [=] { maybe_finish(self, config); });
  auto& heir = st.shell.succession;
  if (heir.rejoining || (heir.follower && !heir.confirmed))
    return st.beats.keep_time(heartbeat_monitor::clock::now());
  const auto timeout = config.opts.heartbeat_timeout;
  const auto verdict = st.beats.expired(heartbeat_monitor::clock::now(), timeout);
  if (verdict.not_running.count() > 0) {
    log_own_pause(config.log, verdict.not_running);
    if (heir.follower) heir.confirmed = false;
  }
  for (const auto& name : verdict.lost)
    lose(self, config, name, fmt::format("no heartbeat for {} ms", timeout.count()));
}

}  // namespace troupe::dp_coordination

namespace troupe {

using namespace dp_coordination;

dp_coordinator_actor::behavior_type dp_coordinator(
    dp_coordinator_actor::stateful_pointer<dp_coordinator_state> self,
    dp_coordinator_config config) {
  accept_exits_only_from(self, config.supervisor, config.log,
                         [=](const caf::error& why) { fail(self, config, describe(why)); });
  auto& gm = self->state.group_metrics;
  self->state.shell.metrics = job_metrics::of(config.metrics);
  self->state.beats = heartbeat_monitor{config.opts.heartbeat_interval};
  self->state.shell.scalars = job_scalars{config.opts, config.log};
  if (config.metrics) {
    gm.bytes = config.metrics->counter("troupe_allreduce_bytes_total");
    gm.seconds = config.metrics->histogram("troupe_allreduce_seconds");
    gm.generation = config.metrics->gauge("troupe_group_generation");
    gm.members = config.metrics->gauge("troupe_group_members");
  }
  self->state.evaluator = self->spawn<caf::detached + caf::linked>(evaluator, config.task);
  self->state.shell.report.mode = to_string(config.opts.mode);  // dp or hybrid
  if (config.tables) {  // --mode hybrid: the group starts once the tables are placed
    self->monitor(config.tables);
    const auto bound = 4 * config.opts.join_timeout + config.opts.request_timeout;
    self->request(config.tables, bound, tables_atom_v)
        .then(
            [=](std::vector<bucket_actor>& buckets, std::string& servers) {
              auto& st = self->state;
              st.table_buckets = std::move(buckets);
              st.table_servers = std::move(servers);
              config.log.info("the tables are in {} buckets", st.table_buckets.size());
              if (st.shell.succession.rejoining) return check_takeover(self, config);
              if (!st.shell.started.has_value() && live_count(st) == config.opts.workers)
                form_group(self, config, "start");
            },
            [=](caf::error& err) { fail(self, config, "placing the tables: " + describe(err)); });
  }
  self->set_down_handler([=](caf::down_msg& msg) {
    const auto timeout = config.opts.takeover_timeout;
    const bool follower = forget_follower(self, msg, timeout, config.log, [=](caf::error err) {
      self->state.shell.phase = job_phase::finishing;
      self->quit(std::move(err));
    });
    if (follower || hold_down_while_overdue(self, msg, timeout)) return;
    if (config.tables && msg.source == config.tables.address())
      return tables_ended(self, config, msg.reason);
    for (const auto& m : self->state.members)
      if (m.handle.address() == msg.source && !m.lost) {
        const std::string why = msg.reason ? describe(msg.reason) : std::string("it ended");
        return lose(self, config, m.name, why);
      }
  });
  self->delayed_send(self, config.opts.heartbeat_interval, tick_atom_v);
  self->state.shell.stall = stall_watch{config.opts.stall_timeout, config.opts.heartbeat_interval};
  if (config.takeover) {
    take_over(self, config);
  } else {
    if (!config.opts.resume.empty())
      resume_or_stop(self, self->state.resume_from, config.opts.resume, config.log);
    config.log.info("waiting for {} workers (data parallel)", config.opts.workers);
  }
  return {
      [=](join_atom, const wire& w, dp_worker_actor handle) {
        return admit(self, config, w, std::move(handle));
      },
      [=](heartbeat_atom, const wire& w) -> uint64_t {
        if (auto beat = decode<heartbeat>(w))
          for (auto& m : self->state.members) {
            if (m.name != beat->name) continue;
            if (m.lost) {
              refuse(self, config, m);
              continue;
            }
            m.heard = heartbeat_monitor::clock::now();
            m.activity = std::move(beat->activity);
            self->state.beats.heard(m.name, m.heard);
          }
        return self->state.shell.succession.term;
      },
      [=](tick_atom) {
        check_heartbeats(self, config);
        check_stall(self, config);
      },
      [=](follow_atom, standby_actor standby) { return follow(self, config, std::move(standby)); },
      [=](tables_atom) -> caf::result<coordinator_actor> {
        if (!config.tables) return make_error(errc::bad_configuration, "this job has no tables");
        return config.tables;
      },
      [=](rejoin_atom, const wire& w, dp_worker_actor handle) {
        return rejoin(self, config, w, std::move(handle));
      },
      [=](step_atom, const wire& w) { on_step(self, config, w); },
      [=](eval_atom, uint32_t epoch, const wire& w) { on_snapshot(self, config, epoch, w); },
      [=](done_atom, uint32_t) {
        auto* m = sender(self);
        if (!m) return config.log.warn("ignored a done message from a stranger");
        if (m->lost) return refuse(self, config, *m);
        m->done = true;
        // Every report a member sends comes before its done: none is still to come.
        if (std::all_of(self->state.members.begin(), self->state.members.end(),
                        [](const dp_member& m) { return m.lost || m.done; }))
          close_open_steps(self, config);
        maybe_finish(self, config);
      },
      [=](broken_atom, uint64_t generation, const std::string& why) {
        auto* m = sender(self);
        if (!m) return;
        if (m->lost) return refuse(self, config, *m);
        if (generation != self->state.generation || self->state.shell.finishing()) return;
        config.log.warn("'{}': a collective of generation {} failed ({})", m->name, generation,
                        why);
        // A loss explains most failures and re-forms at once; give detection its time.
        self->delayed_send(self, config.opts.heartbeat_timeout, tick_atom_v, generation);
      },
      [=](tick_atom, uint64_t generation) {
        auto& st = self->state;
        if (!sent_by(self, self->address()) || generation != st.generation || st.shell.finishing() ||
            st.shell.succession.rejoining)
          return;
        form_group(self, config, "a collective failed with every member alive");
      },
      [=](put_atom, const wire& w) { return store_put(self, w); },
      [=](inspect_atom, const std::string& view) { return inspect(self, config, view); },
      [=](save_atom, uint64_t step, uint32_t index, uint32_t count, const wire& part) {
        on_save(self, config, step, index, count, part);
      },
      [=](get_atom, const wire& w) { return store_get(self, w); },
      [=](event_atom, const std::string& server, const std::string& why) {
        if (!config.tables || self->current_sender() != config.tables.address())
          return config.log.warn("ignored a lost server not told by the tables' coordinator");
        // (Not in the members-lost metric: the tables' coordinator counted it there, in the
        // registry the two share.)
        auto& st = self->state;
        st.shell.report.losses.push_back(
            loss_event{server, role::server, st.shell.training_s(), unix_ms_now(), why});
        send_standing(self, config);  // a standby's report lists it too
      },
      [=](which_atom, uint32_t bucket, bucket_actor failed) -> caf::result<bucket_actor> {
        if (!config.tables) return make_error(errc::bad_configuration, "this job has no tables");
        return self->delegate(config.tables, which_atom_v, bucket, std::move(failed));
      },
  };
}

}  // namespace troupe
