#include "actors/coordinator/coordinator.hpp"

#include "actors/dp/plan/dp_plan_parts.hpp"
#include "actors/ps/ps_plan_parts.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/error.hpp"

namespace troupe {

coordinator_state::coordinator_state() = default;
coordinator_state::~coordinator_state() = default;

std::vector<job_plan*> coordinator_state::plans() const {
  std::vector<job_plan*> out;
  if (ps) out.push_back(ps.get());
  if (dp) out.push_back(dp.get());
  return out;
}

job_plan* coordinator_state::trainer() const {
  return dp ? static_cast<job_plan*>(dp.get()) : ps.get();
}

namespace {

namespace psp = ps_plan;  // the parameter service's plan
namespace dpp = dp_plan;  // the data-parallel plan

caf::error no_plan(const char* what) {
  return make_error(errc::bad_configuration, std::string("this job has no ") + what);
}

// The shell's parts that come from the options, and the plans of the job's mode.
void start_plans(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  const auto& o = config.opts;
  st.shell.metrics = job_metrics::of(config.metrics);
  st.shell.scalars = job_scalars{o, config.log};
  st.shell.operators = operator_gate{o.tls_dir, o.operator_secret};
  st.shell.stall = stall_watch{o.stall_timeout, o.heartbeat_interval};
  st.shell.report.mode = to_string(o.mode);
  st.shell.beats = heartbeat_monitor{o.heartbeat_interval};
  if (!o.data_parallel() || o.hybrid()) {
    st.ps = std::make_unique<ps_state>();
    if (config.task && !o.data_parallel())  // (an app's service evaluates nothing)
      st.ps->evaluation.actor = self->spawn<caf::detached + caf::linked>(evaluator, config.task);
  }
  if (o.data_parallel()) {
    st.dp = std::make_unique<dp_state>();
    if (config.metrics) {
      auto& gm = st.dp->group_metrics;
      gm.bytes = config.metrics->counter("troupe_allreduce_bytes_total");
      gm.seconds = config.metrics->histogram("troupe_allreduce_seconds");
      gm.generation = config.metrics->gauge("troupe_group_generation");
      gm.members = config.metrics->gauge("troupe_group_members");
    }
    st.dp->evaluator = self->spawn<caf::detached + caf::linked>(evaluator, config.task);
    st.shell.report.zero_stage = o.dp.zero_stage;
  }
  if (o.hybrid()) st.on_tables_ready = [self, config] { dpp::on_tables_ready(self, config); };
}

// A member's down message goes to the plan it belongs to.
void on_down(coordinator_self self, const job_config& config, const caf::down_msg& msg) {
  auto& st = self->state;
  if (st.ps) psp::on_down(self, config, msg);
  if (!st.dp || st.shell.finishing()) return;
  for (const auto& m : st.dp->members)
    if (m.handle.address() == msg.source && !m.lost) {
      const std::string why = msg.reason ? describe(msg.reason) : std::string("it ended");
      return dpp::lose(self, config, m.name, why);
    }
}

// Every heartbeat interval: losses, the stall watch, the takeover's deadline, the standing,
// an end that waited, and what the ps plan retries (an evaluation, the tables).
void on_tick(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  self->delayed_send(self, config.opts.heartbeat_interval, tick_atom_v);
  check_members(self, config);
  if (st.dp) dpp::check_tables_deadline(self, config);
  end_takeover_when_back(self, config);
  send_standing(self, config);
  take_deferred_end(
      st.shell.succession, config.opts.takeover_timeout,
      [=](const std::string& why) { fail_job(self, config, why); },
      [=] { finish_job(self, config); });
  if (!st.ps || st.shell.finishing()) return;
  psp::maybe_evaluate(self, config);  // one that failed during a recovery is tried again
  if (config.hands_out_buckets()) psp::hand_tables(self);  // once a takeover's promotions are done
}

void begin(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  if (config.takeover) {
    begin_takeover(self, config);
    if (st.ps) psp::take_over(self, config);
    if (st.dp && !st.shell.finishing()) dpp::take_over(self, config);
    return;
  }
  if (!config.opts.resume.empty()) {
    if (st.dp) {  // (hybrid: one file, the model's state then the tables')
      resume_or_stop(self, st.dp->resume_from, config.opts.resume, config.log);
      if (st.ps && st.dp->resume_from) dpp::split_hybrid_checkpoint(st);
    } else if (st.ps) {
      resume_or_stop(self, st.ps->checkpoints.resume_from, config.opts.resume, config.log);
    }
  }
  if (st.ps)
    config.log.info("waiting for {} servers and {} workers", config.opts.servers,
                    config.hands_out_buckets() ? 0 : config.opts.workers);
  if (st.dp) config.log.info("waiting for {} workers (data parallel)", config.opts.workers);
}

}  // namespace

job_actor::behavior_type coordinator(coordinator_self self, job_config config) {
  accept_exits_only_from(self, config.supervisor, config.log,
                         [=](const caf::error& why) { fail_job(self, config, describe(why)); });
  start_plans(self, config);
  self->set_down_handler([=](caf::down_msg& msg) {
    const auto timeout = config.opts.takeover_timeout;
    const bool follower = forget_follower(self, msg, timeout, config.log, [=](caf::error err) {
      self->state.shell.phase = job_phase::finishing;
      self->quit(std::move(err));
    });
    if (!follower && !hold_down_while_overdue(self, msg, timeout)) on_down(self, config, msg);
  });
  self->delayed_send(self, config.opts.heartbeat_interval, tick_atom_v);
  begin(self, config);
  return {
      // -- the shell's
      [=](heartbeat_atom, const wire& w) { return on_heartbeat(self, config, w); },
      [=](tick_atom) { on_tick(self, config); },
      [=](follow_atom, standby_actor standby) {
        return follow_job(self, config, std::move(standby));
      },
      [=](escalate_atom, const std::string& why) {
        ++self->state.shell.report.escalations;
        add(self->state.shell.metrics.escalations, 1);
        config.log.error("a node supervisor escalated: {}", why);
      },
      [=](inspect_atom, const std::string& view) { return inspect_job(self, config, view); },
      [=](nonce_atom) { return self->state.shell.operators.fresh_nonce(); },
      [=](operate_atom, const wire& w) -> caf::result<std::string> {
        auto action = self->state.shell.operators.check(w);
        if (!action) {
          config.log.warn("{}", describe(action.error()));
          return std::move(action.error());
        }
        return operate_job(self, config, *action);
      },
      [=](done_atom, uint32_t rank) {
        auto& st = self->state;
        if (!st.dp) return psp::on_done(self, config, rank);
        auto* m = dpp::sender(self);
        if (!m) return config.log.warn("ignored a done message from a stranger");
        if (m->lost) return dpp::refuse(self, config, *m);
        m->done = true;
        // Every report a member sends comes before its done: none is still to come.
        if (std::all_of(st.dp->members.begin(), st.dp->members.end(),
                        [](const dp_member& m) { return m.lost || m.done; }))
          dpp::close_open_steps(self, config);
        dpp::maybe_finish(self, config);
      },
      [=](which_atom, uint32_t bucket, const bucket_actor& failed) -> caf::result<bucket_actor> {
        if (!self->state.ps) return no_plan("buckets");
        return psp::which(self, bucket, failed);
      },
      // -- the parameter service's plan
      [=](join_atom, const wire& w, server_actor s) -> caf::result<wire> {
        if (!self->state.ps) return no_plan("servers: --mode dp");
        return psp::admit_server(self, config, w, std::move(s));
      },
      [=](join_atom, const wire& w, worker_actor x) -> caf::result<wire> {
        if (!self->state.ps || config.opts.data_parallel())
          return no_plan("parameter-service workers: it is a data-parallel job");
        return psp::admit_worker(self, config, w, std::move(x));
      },
      [=](claim_atom, uint32_t rank, uint32_t most) -> caf::result<wire> {
        if (!self->state.ps) return no_plan("batches to claim");
        return psp::claim(self, rank, most);
      },
      [=](progress_atom, const wire& w) {
        if (self->state.ps) psp::on_progress(self, config, w);
      },
      [=](rejoin_atom, const wire& w, server_actor s,
          std::vector<bucket_actor> buckets) -> caf::result<wire> {
        if (!self->state.ps) return no_plan("servers: --mode dp");
        return psp::rejoin_server(self, config, w, std::move(s), std::move(buckets));
      },
      [=](rejoin_atom, const wire& w, worker_actor x) -> caf::result<wire> {
        if (!self->state.ps) return no_plan("parameter-service workers");
        return psp::rejoin_worker(self, config, w, std::move(x));
      },
      [=](backup_atom, uint32_t bucket, const bucket_actor& reporter, const bucket_actor& failed) {
        if (self->state.ps) psp::backup_failed(self, config, bucket, reporter, failed);
      },
      [=](moved_atom, uint32_t bucket, bucket_actor handle) {
        if (self->state.ps) psp::moved(self, config, bucket, std::move(handle));
      },
      [=](service_atom,
          const std::string& name) -> caf::result<wire, caf::actor, std::vector<bucket_actor>> {
        return make_error(errc::bad_configuration,
                          "no parameter service '" + name +
                              "': a training job's parameters are its workers' (an app_node "
                              "serves services)");
      },
      [=](tables_atom) -> caf::result<std::vector<bucket_actor>, std::string> {
        if (!self->state.ps) return no_plan("tables");
        return psp::want_tables(self, config);
      },
      [=](group_atom, const std::string& name) -> caf::result<caf::actor> {
        return make_error(errc::bad_configuration, "no loop group '" + name +
                                                       "': a training job's coordinator serves "
                                                       "none (an app node serves them)");
      },
      [=](stop_atom, const std::string& failure) {
        if (self->state.ps) psp::stop_service(self, config, failure);
      },
      // -- the data-parallel plan
      [=](join_atom, const wire& w, dp_worker_actor handle) -> caf::result<wire> {
        if (!self->state.dp) return no_plan("data-parallel workers: --mode ps");
        return dpp::admit(self, config, w, std::move(handle));
      },
      [=](rejoin_atom, const wire& w, dp_worker_actor handle) -> caf::result<wire> {
        if (!self->state.dp) return no_plan("data-parallel workers: --mode ps");
        return dpp::rejoin(self, config, w, std::move(handle));
      },
      [=](step_atom, const wire& w) {
        if (self->state.dp) dpp::on_step(self, config, w);
      },
      [=](eval_atom, uint32_t epoch, uint32_t part, const wire& w) {
        if (self->state.dp) dpp::on_snapshot(self, config, epoch, part, w);
        return true;  // (the member sends the next part once this one is in)
      },
      [=](broken_atom, uint64_t generation, const std::string& why) {
        if (self->state.dp) dpp::on_broken(self, config, generation, why);
      },
      [=](tick_atom, uint64_t generation) {
        if (self->state.dp) dpp::on_broken_tick(self, config, generation);
      },
      [=](put_atom, const wire& w) -> caf::result<bool> {
        if (!self->state.dp) return no_plan("rendezvous store");
        return dpp::store_put(self, w);
      },
      [=](get_atom, const wire& w) -> caf::result<wire> {
        if (!self->state.dp) return no_plan("rendezvous store");
        return dpp::store_get(self, w);
      },
      [=](save_atom, uint64_t step, uint32_t index, uint32_t count,
          const wire& part) -> caf::result<bool> {
        // (member 0 sends the next part once this one is written)
        if (!self->state.dp) return true;
        return dpp::on_save(self, config, step, index, count, part);
      },
      [=](pieces_atom, uint64_t step, uint32_t index, uint32_t count,
          const wire& part) -> caf::result<bool> {
        if (!self->state.dp) return true;
        return dpp::on_save_pieces(self, config, step, index, count, part);
      },
  };
}

}  // namespace troupe
