// The primary's side of the standby coordinator: what the standby follows (the coordinator's
// standing), sending it every heartbeat interval and after changes, and stopping when the
// standby says it has taken over (a deposed primary must not act on the job again).
#include <fmt/format.h>

#include "actors/coordinator/coordinator_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::coordination {

namespace {

member_standing standing_of(const member& m) {
  return member_standing{m.name,    m.data,  m.lost,  m.done,      m.draining,
                         m.drained, m.steps, m.clock, m.compute_s, m.wall_s};
}

}  // namespace

coordinator_standing standing_of(const coordinator_state& st, const coordinator_config& config) {
  coordinator_standing x;
  x.term = st.shell.succession.term;
  // --mode hybrid: the tables' coordinator has no work plan; it is in training once its tables
  // are placed and handed to the group.
  x.training = st.shell.phase == job_phase::training && (st.training.work || config.hands_out_buckets());
  if (x.training && st.training.work) x.plan = job_progress(st);
  for (const auto& m : st.roster.server_members) x.servers.push_back(standing_of(m));
  for (const auto& m : st.roster.worker_members) x.workers.push_back(standing_of(m));
  for (const auto& home : st.directory.homes) {
    home_standing h{home.primary_server, {}};
    for (const auto& copy : home.backups) h.backups.push_back(copy.server);
    x.homes.push_back(std::move(h));
  }
  const job_report& r = st.shell.report;
  x.losses = r.losses;
  x.takeovers = r.takeovers;
  x.workers_lost = r.workers_lost;
  x.drained = r.drained;
  x.written = st.checkpoints.written;
  x.restarts = r.restarts;
  x.escalations = r.escalations;
  x.since_last = st.checkpoints.since_last;
  x.chunks_done = st.checkpoints.chunks_done;
  x.resumed_from_step = r.resumed_from_step;
  x.recovery_s = r.recovery_s;
  x.resumed_wall_s = st.shell.resumed_wall_s;
  return x;
}

uint64_t follow(self_ptr self, const coordinator_config& config, standby_actor standby) {
  return accept_follower(self, std::move(standby), config.log,
                         [=] { send_standing(self, config); });
}

void send_standing(self_ptr self, const coordinator_config& config) {
  auto& st = self->state;
  if (!st.shell.succession.follower || st.shell.phase == job_phase::finishing) return;
  auto standing = standing_of(st, config);
  const bool training = standing.training;
  // Once the standby holds this standing, each worker may forget the chunks it counts.
  // (Not while workers rejoin a takeover: their chunks are in accounts the standing lacks.)
  std::vector<std::pair<worker_actor, uint64_t>> held;
  for (size_t i = 0; i < st.roster.workers.size() && !st.shell.succession.rejoining; ++i)
    if (!st.roster.worker_members[i].lost && st.roster.workers[i])
      held.emplace_back(st.roster.workers[i], st.roster.worker_members[i].clock);
  offer_standing(
      self, config.opts.takeover_timeout, encode(standing), training, config.log,
      [=] {
        for (const auto& [worker, clock] : held) self->send(worker, state_atom_v, clock);
      },
      [=](caf::error err) {
        // Not fail(): the report and the members are the new coordinator's now.
        self->state.shell.phase = job_phase::finishing;
        self->quit(std::move(err));
      });
}

}  // namespace troupe::coordination
