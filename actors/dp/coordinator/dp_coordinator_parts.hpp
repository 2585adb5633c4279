// The dp coordinator's functions, shared by its files: dp_coordinator.cpp (forming groups,
// membership, the end), dp_steps.cpp (step reports and evaluation), dp_store.cpp (the
// rendezvous store), dp_checkpoints.cpp (checkpoints and --resume), dp_standing.cpp (the
// standby and taking over) and dp_inspection.cpp (the console's views and the metrics).
// Internal to actors/; called only from the dp coordinator's handlers.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "actors/dp/coordinator/dp_coordinator.hpp"
#include "actors/records/timing.hpp"

namespace troupe::dp_coordination {

using self_ptr = dp_coordinator_actor::stateful_pointer<dp_coordinator_state>;

size_t live_count(const dp_coordinator_state& st);
// The member that sent the message being handled, if it is one.
dp_member* sender(self_ptr self);
// A member declared lost that speaks again is told to stop, once.
void refuse(self_ptr self, const dp_coordinator_config& config, dp_member& m);
// Writes the report with `why` and stops everyone.
void fail(self_ptr self, const dp_coordinator_config& config, const std::string& why);
// Ends the job once every epoch is evaluated and every live member is done.
void maybe_finish(self_ptr self, const dp_coordinator_config& config);
// A new generation of the live members (`why` is logged).
void form_group(self_ptr self, const dp_coordinator_config& config, const std::string& why);
// Marks `m` lost (the report's losses, the metrics) without forming a new generation.
void record_loss(dp_coordinator_state& st, dp_member& m, const std::string& why);

// Every tick: the stall watchdog (--stall-timeout) judges the group's progress; a stalled job
// ends with each member's last activity in its report.
void check_stall(self_ptr self, const dp_coordinator_config& config);

// -- dp_steps.cpp
// A member's step_report; a step counts once, a member's report of a step counted for it is
// dropped.
void on_step(self_ptr self, const dp_coordinator_config& config, const wire& w);
// Evaluates the next parameters queued, unless one is under way (or a takeover is).
void evaluate_next(self_ptr self, const dp_coordinator_config& config);
// A member was lost: the steps still waiting for its reports are taken as they are.
void close_open_steps(self_ptr self, const dp_coordinator_config& config);
// A member's parameters after `epoch` (pull_reply): queued for evaluation, the first only.
void on_snapshot(self_ptr self, const dp_coordinator_config& config, uint32_t epoch, const wire& w);

// -- dp_store.cpp
caf::result<bool> store_put(self_ptr self, const wire& w);
caf::result<wire> store_get(self_ptr self, const wire& w);

// -- dp_checkpoints.cpp
caf::error take_resume(dp_coordinator_state& st, const dp_coordinator_config& config);
// The job's progress after `step` as a checkpoint holds it (and a standing).
job_checkpoint progress_of(const dp_coordinator_state& st, const dp_coordinator_config& config,
                           uint64_t step);
// Takes the progress `job` holds (steps, epoch losses, evaluations) into the state, whose
// per-epoch vectors are sized already.
void adopt_progress(dp_coordinator_state& st, const job_checkpoint& job);
void on_save(self_ptr self, const dp_coordinator_config& config, uint64_t step, uint32_t index,
             uint32_t count, const wire& part);

// -- dp_standing.cpp
// A standby asks to follow: it gets this coordinator's standing from now on.
uint64_t follow(self_ptr self, const dp_coordinator_config& config, standby_actor standby);
// Sends the follower the standing (every tick, after a generation, a loss or an evaluation);
// once it is taken, or at once with no follower, tells the members what they may stop holding.
void send_standing(self_ptr self, const dp_coordinator_config& config);
// Starts this coordinator from config.takeover: the old primary's state, its members to rejoin.
void take_over(self_ptr self, const dp_coordinator_config& config);
// A member rejoins after the takeover (answered once all are back or at the deadline).
caf::result<wire> rejoin(self_ptr self, const dp_coordinator_config& config, const wire& w,
                         dp_worker_actor handle);
// Ends a takeover once every member is back or its deadline has passed (members not back are
// lost) and, with --mode hybrid, the tables' coordinator has handed over the tables: a new
// generation forms.
void check_takeover(self_ptr self, const dp_coordinator_config& config);

// -- dp_tables.cpp (--mode hybrid)
// The tables' coordinator ended (`reason`): deposed, this coordinator is too; during a
// takeover, the takeover failed (nothing of the job is ours yet); otherwise the job fails.
void tables_ended(self_ptr self, const dp_coordinator_config& config, const caf::error& reason);
// Pulls the rows evaluation reads from the table buckets into input->rows, then `then`; a
// bucket that does not answer fails the job.
void pull_evaluation_rows(self_ptr self, const dp_coordinator_config& config,
                          std::shared_ptr<eval_input> input, std::function<void()> then);
// Adds the table buckets' statistics (updates, staleness) to the report, then `then`.
void gather_table_stats(self_ptr self, const dp_coordinator_config& config,
                        std::function<void()> then);

// -- dp_inspection.cpp
// The console's views of a dp job: "group", "tree", "nodes", "metrics".
caf::result<wire> inspect(self_ptr self, const dp_coordinator_config& config,
                          const std::string& view);

}  // namespace troupe::dp_coordination
