// The data-parallel coordinator's succession. As a primary: its standing for a standby (the
// members, the generation, the progress and the report so far, with no handles), and the word
// to each member of what it may stop holding for a takeover (its step reports through the
// step it reported last, the parameters of the epochs evaluated) once the standby has taken a
// standing with them. As the standby that took over: it starts from that standing, each member
// rejoins with its handle and sends again what it holds, and once every member is back (or at
// the deadline, the others lost) the members form a new generation and go on from the most
// advanced member's state, as after any change of membership.
#include <fmt/format.h>

#include "actors/dp/plan/dp_plan_parts.hpp"
#include "actors/dp/trainer/dp_schedule.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_plan {

namespace {

void restore_report(coordinator_state& st, const coordinator_standing& x) {
  const dp_group_standing& g = *x.dp;
  job_report& r = st.shell.report;
  r.figures = g.figures;
  r.allreduce_bytes = g.allreduce_bytes;
  r.allreduce_bytes_inter_host = g.bytes_inter_host;
  r.allreduce_bytes_warmup = g.bytes_warmup;
  r.allreduce_bytes_compressed = g.bytes_compressed;
  r.steps_warmup = g.steps_warmup;
  r.steps_compressed = g.steps_compressed;
  r.skipped_steps = g.skipped_steps;
  r.checksum_mismatches = g.checksum_mismatches;
  r.checkpoints = g.checkpoints;
  r.allreduce_s = g.allreduce_s;
  r.reform_s = g.reform_s;
  st.dp->exposed_s = g.exposed_s;
}

// What each member may stop holding: its reports through the step it last reported, and the
// parameters of the epochs evaluated.
struct held_through {
  std::vector<std::pair<dp_worker_actor, uint64_t>> reports;
  uint32_t evaluated = 0;
};

held_through held_now(const coordinator_state& st) {
  held_through h;
  h.evaluated = st.dp->evaluated;
  for (const auto& m : st.dp->members)
    if (!m.lost && m.handle) h.reports.emplace_back(m.handle, m.last_step);
  return h;
}

void tell_held(self_ptr self, const held_through& h) {
  for (const auto& [handle, step] : h.reports) self->send(handle, state_atom_v, step, h.evaluated);
}

join_reply reply_for(const coordinator_state& st, const job_config& config, const dp_member& m) {
  return join_reply{m.rank, config.opts.workers, 0, st.shell.succession.term};
}

}  // namespace

void form_after_takeover(self_ptr self, const job_config& config) {
  auto& st = self->state;
  st.dp->form_when_tables_ready = false;
  form_group(self, config, "took over");  // the starts go before the replies
  for (auto& [reply, index] : st.dp->replies)
    reply.deliver(encode(reply_for(st, config, st.dp->members[index])));
  st.dp->replies.clear();
  evaluate_next(self, config);  // parameters sent again meanwhile
}

void take_over(self_ptr self, const job_config& config) {
  auto& st = self->state;
  const coordinator_standing& x = *config.takeover;
  const auto& o = config.opts;
  st.dp->generation = x.dp->generation;
  st.dp->global_batch = x.dp->global_batch;
  st.dp->steps_per_epoch =
      dp_steps_per_epoch(config.task->batches_per_epoch(1), st.dp->global_batch);
  if (x.plan.epochs != o.epochs || x.plan.batches_per_epoch != st.dp->steps_per_epoch) {
    // Not fail(): the job is the old primary's members', and nobody has rejoined this one.
    config.log.error("the old primary's state does not fit this job's flags; giving up");
    st.shell.phase = job_phase::finishing;
    return self->quit(make_error(errc::bad_configuration, "the primary runs another job"));
  }
  st.dp->epoch_loss.assign(o.epochs, 0.0);
  st.dp->epoch_examples.assign(o.epochs, 0);
  st.dp->snapshot_taken.assign(o.epochs, false);
  st.dp->applied_examples = x.dp->applied_examples;
  st.dp->applied_examples.resize(o.epochs, 0);
  adopt_progress(st, x.plan);
  restore_report(st, x);
  for (size_t i = 0; i < x.workers.size(); ++i) {
    const member_standing& w = x.workers[i];
    dp_member m{w.name};
    m.host = x.dp->hosts[i];
    m.index = static_cast<uint32_t>(i);
    m.lost = m.refused = w.lost;  // a lost member that speaks again is stopped at once
    m.done = w.done;
    m.steps = w.steps;
    m.last_step = w.clock;
    m.examples = x.dp->examples[i];
    m.step_examples = x.dp->step_examples[i];
    m.compute_s = w.compute_s;
    m.wall_s = w.wall_s;
    st.dp->members.push_back(std::move(m));
  }
  config.log.warn("the group was at step {}, generation {}; waiting for {} workers to rejoin",
                  st.dp->steps, st.dp->generation, live_count(st));
}

caf::result<wire> rejoin(self_ptr self, const job_config& config, const wire& w,
                         dp_worker_actor handle) {
  auto& st = self->state;
  auto& heir = st.shell.succession;
  auto request = decode<rejoin_request>(w);
  if (!request) return std::move(request.error());
  if (request->sender != role::worker)
    return make_error(errc::malformed_message, "rejoin: a data-parallel job has workers only");
  auto it = std::find_if(st.dp->members.begin(), st.dp->members.end(),
                         [&](const dp_member& m) { return m.name == request->name; });
  if (it == st.dp->members.end())
    return make_error(errc::authentication_failed,
                      fmt::format("rejoin: no worker '{}' in this job", request->name));
  dp_member& m = *it;
  if (m.lost) return make_error(errc::job_failed, "rejoin: this worker was declared lost");
  if (m.handle) {  // our own member, after its watch lost us for a while: nothing changes
    if (m.handle.address() != handle.address())
      return make_error(errc::bad_configuration, "rejoin: another worker has that name");
    if (!heir.rejoining) return encode(reply_for(st, config, m));
    auto again = self->make_response_promise<wire>();  // answered with the others
    st.dp->replies.emplace_back(again, m.index);
    return again;
  }
  if (!heir.rejoining)
    return make_error(errc::job_failed, "rejoin: too late, the takeover is over");
  m.handle = std::move(handle);
  self->monitor(m.handle);
  expect_heartbeats(self, m.name, m.handle.node());
  if (!request->host.empty()) m.host = request->host;
  // The next generation must be newer than any a member knows: the old primary may have
  // formed one its last standing did not name.
  st.dp->generation = std::max(st.dp->generation, request->generation);
  config.log.info("worker '{}' rejoined after step {}", m.name, request->steps);
  auto reply = self->make_response_promise<wire>();
  st.dp->replies.emplace_back(reply, m.index);
  end_takeover_when_back(self, config);
  return reply;
}

}  // namespace troupe::dp_plan

namespace troupe {

void dp_state::stand(coordinator_self self, const job_config& config, coordinator_standing& x,
                     std::vector<std::function<void()>>& held) {
  const auto& st = self->state;
  x.training = x.training && st.shell.started.has_value();
  x.plan = dp_plan::progress_of(st, config, steps);
  dp_group_standing g;
  g.generation = generation;
  g.global_batch = global_batch;
  for (const auto& m : members) {
    x.workers.push_back(member_standing{m.name, endpoint{}, m.lost, m.done, false, false, m.steps,
                                        m.last_step, m.compute_s, m.wall_s});
    g.hosts.push_back(m.host);
    g.examples.push_back(m.examples);
    g.step_examples.push_back(m.step_examples);
  }
  const job_report& r = st.shell.report;
  g.applied_examples = applied_examples;
  g.figures = r.figures;
  g.allreduce_bytes = r.allreduce_bytes;
  g.bytes_inter_host = r.allreduce_bytes_inter_host;
  g.bytes_warmup = r.allreduce_bytes_warmup;
  g.bytes_compressed = r.allreduce_bytes_compressed;
  g.steps_warmup = r.steps_warmup;
  g.steps_compressed = r.steps_compressed;
  g.skipped_steps = r.skipped_steps;
  g.checksum_mismatches = r.checksum_mismatches;
  g.checkpoints = r.checkpoints;
  g.allreduce_s = r.allreduce_s;
  g.exposed_s = exposed_s;
  g.reform_s = r.reform_s;
  x.dp = std::move(g);
  held.push_back([self, h = dp_plan::held_now(st)] { dp_plan::tell_held(self, h); });
}

void dp_state::without_standby(coordinator_self self) {
  dp_plan::tell_held(self, dp_plan::held_now(self->state));
}

size_t dp_state::missing() const {
  return size_t(std::count_if(members.begin(), members.end(),
                              [](const dp_member& m) { return !m.lost && !m.handle; }));
}

size_t dp_state::rejoined() const {
  return size_t(std::count_if(members.begin(), members.end(),
                              [](const dp_member& m) { return bool(m.handle); }));
}

void dp_state::taken_over(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  for (auto& m : members)
    if (!m.lost && !m.handle) dp_plan::record_loss(st, m, "did not rejoin after the takeover");
  // --mode hybrid: the group forms once the ps plan serves every table bucket again.
  if (config.opts.hybrid() && !ps_plan::tables_ready(st)) {
    form_when_tables_ready = true;
    return;
  }
  dp_plan::form_after_takeover(self, config);
}

}  // namespace troupe
