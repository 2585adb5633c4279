// The parameter service plan's part of the standing a standby follows: its members, where its
// buckets live, its batches and checkpoints, and, once the standby holds it, the word to each
// worker that it may forget the chunks the standing counts. (Sending it, and stopping when the
// standby says it has taken over, is the shell's: actors/job/shell_end.cpp.)
#include "actors/ps/ps_plan_parts.hpp"

namespace troupe {

namespace {

member_standing standing_of(const member& m) {
  return member_standing{m.name,    m.data,  m.lost,  m.done,      m.draining,
                         m.drained, m.steps, m.clock, m.compute_s, m.wall_s};
}

}  // namespace

void ps_state::stand(coordinator_self self, const job_config& config, coordinator_standing& x,
                     std::vector<std::function<void()>>& held) {
  const auto& st = self->state;
  // --mode hybrid and an app's service: no work plan; in training once the buckets are placed.
  const bool in_training =
      st.shell.phase == job_phase::training && (training.work || config.hands_out_buckets());
  x.training = x.training && in_training;
  if (in_training && training.work) x.plan = ps_plan::job_progress(st);
  for (const auto& m : roster.server_members) x.servers.push_back(standing_of(m));
  for (const auto& m : roster.worker_members) x.workers.push_back(standing_of(m));
  for (const auto& home : directory.homes) {
    home_standing h{home.primary_server, {}};
    for (const auto& copy : home.backups) h.backups.push_back(copy.server);
    x.homes.push_back(std::move(h));
  }
  const job_report& r = st.shell.report;
  x.drained = r.drained;
  x.restarts = r.restarts;
  x.escalations = r.escalations;
  x.chunks_done = checkpoints.chunks_done;
  x.recovery_s = r.recovery_s;
  // Once the standby holds this standing, each worker may forget the chunks it counts. (Not
  // while workers rejoin a takeover: their chunks are in accounts the standing lacks.)
  if (st.shell.succession.rejoining) return;
  for (size_t i = 0; i < roster.workers.size(); ++i)
    if (!roster.worker_members[i].lost && roster.workers[i])
      held.push_back([self, worker = roster.workers[i], clock = roster.worker_members[i].clock] {
        self->send(worker, state_atom_v, clock);
      });
}

}  // namespace troupe
