// coordinator: the root of every job, one actor for --mode ps, dp and hybrid: the job shell
// (actors/job: phase, report, succession, the end) with the plans of its mode (actors/ps: the
// parameter service's buckets, batches and evaluations; actors/dp/plan: the data-parallel
// group's generations and steps; --mode hybrid both, the ps plan holding the embedding
// tables). Its behavior hands each message to the plan it belongs to (coordinator.cpp); what
// both plans receive (heartbeats, the tick, done, which, inspect, a member's down message)
// goes to each plan present. With config.takeover it is a standby's coordinator taking over
// from a lost primary: one standing and one takeover for every plan. It also serves an app's
// parameter service on servers (config.service: the ps plan alone, handing its buckets out).
// Spawned by the launchers (actors/launch) and parameter_service (actors/app).
#pragma once

#include "actors/job/coordinator_state.hpp"
#include "messages/protocol.hpp"

namespace troupe {

job_actor::behavior_type coordinator(coordinator_self self, job_config config);

}  // namespace troupe
