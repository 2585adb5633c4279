// The dp coordinator's functions, shared by its files: dp_plan.cpp (forming groups,
// membership, the end), dp_steps.cpp (step reports and evaluation), dp_store.cpp (the
// rendezvous store), dp_checkpoints.cpp (checkpoints and --resume), dp_standing.cpp (the
// standby and taking over) and dp_inspection.cpp (the console's views and the metrics).
// Internal to actors/; called by the plan's own files and the coordinator (actors/coordinator).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "actors/dp/plan/dp_plan.hpp"
#include "actors/ps/ps_plan_parts.hpp"
#include "actors/records/timing.hpp"

namespace troupe::dp_plan {

using self_ptr = coordinator_self;

size_t live_count(const coordinator_state& st);
// The member that sent the message being handled, if it is one.
dp_member* sender(self_ptr self);
// A member declared lost that speaks again is told to stop, once.
void refuse(self_ptr self, const job_config& config, dp_member& m);
// Ends the job once every epoch is evaluated and every live member is done.
void maybe_finish(self_ptr self, const job_config& config);
// A new generation of the live members (`why` is logged).
void form_group(self_ptr self, const job_config& config, const std::string& why);
// Marks `m` lost (the report's losses, the metrics) without forming a new generation.
void record_loss(coordinator_state& st, dp_member& m, const std::string& why);

// A worker joins (join_request): admitted while the group forms, or late (--max-workers).
caf::result<wire> admit(self_ptr self, const job_config& config, const wire& w,
                        dp_worker_actor handle);
// Member `name` is lost (`why`): the group re-forms without it, or the job fails.
void lose(self_ptr self, const job_config& config, const std::string& name, const std::string& why);
// A member's collective of `generation` failed (`why`): unless a loss explains it first, the
// live members form a new generation after --heartbeat-timeout-ms (on_broken_tick).
void on_broken(self_ptr self, const job_config& config, uint64_t generation,
               const std::string& why);
void on_broken_tick(self_ptr self, const job_config& config, uint64_t generation);

// -- dp_steps.cpp
// A member's step_report; a step counts once, a member's report of a step counted for it is
// dropped.
void on_step(self_ptr self, const job_config& config, const wire& w);
// Evaluates the next parameters queued, unless one is under way (or a takeover is).
void evaluate_next(self_ptr self, const job_config& config);
// A member was lost: the steps still waiting for its reports are taken as they are.
void close_open_steps(self_ptr self, const job_config& config);
// A member's parameters after `epoch` (pull_reply): queued for evaluation, the first only.
void on_snapshot(self_ptr self, const job_config& config, uint32_t epoch, uint32_t part,
                 const wire& w);

// -- dp_store.cpp
caf::result<bool> store_put(self_ptr self, const wire& w);
caf::result<wire> store_get(self_ptr self, const wire& w);

// -- dp_checkpoints.cpp
caf::error take_resume(coordinator_state& st, const job_config& config);
// --zero-stage 1 or 2 with --shard-backups 0, a member lost: the newest checkpoint in
// --checkpoint-dir becomes the state the next generation starts from (every member restored),
// and the progress goes back to it; the step it was saved after, or why there is none.
caf::expected<uint64_t> go_back_to_checkpoint(self_ptr self, const job_config& config);
// --mode hybrid's --resume: the checkpoint's tables' buckets (after the model's state, bucket 0)
// go to the ps plan, which places them; the dp plan keeps the model's.
void split_hybrid_checkpoint(coordinator_state& st);
// The job's progress after `step` as a checkpoint holds it (and a standing).
job_checkpoint progress_of(const coordinator_state& st, const job_config& config, uint64_t step);
// Takes the progress `job` holds (steps, epoch losses, evaluations) into the state, whose
// per-epoch vectors are sized already.
void adopt_progress(coordinator_state& st, const job_checkpoint& job);
// Member 0's checkpoint part `index` of its state after `step` (count: 0 while more follow,
// the number of parts with the last). In --mode hybrid the last is answered once the tables'
// buckets are saved in the same file (save_tables_when_settled).
caf::result<bool> on_save(self_ptr self, const job_config& config, uint64_t step, uint32_t index,
                          uint32_t count, const wire& part);
// With --zero-stage 1 or 2: part `index` of member `rank`'s own pieces after `step` (count as
// above), written into the same checkpoint as member 0's parameters once those are in; the
// file is finished once every member's last part is.
caf::result<bool> on_save_pieces(self_ptr self, const job_config& config, uint64_t step,
                                 uint32_t index, uint32_t count, const wire& part);
// A checkpoint of sharded state being written ends unwritten (`why`: the group re-formed),
// and so does one waiting to open; the parts that wait are answered.
void abandon_checkpoint(self_ptr self, const job_config& config, const std::string& why);
// Opens the checkpoint whose first part waits for its step's reports, once they are in.
void open_checkpoint_when_settled(self_ptr self, const job_config& config);
// --mode hybrid: saves the tables' buckets of the checkpoint whose last part came, once every
// member's report of its step is in (a member reports a step once its rows are in the tables).
void save_tables_when_settled(self_ptr self, const job_config& config);
// A checkpoint waiting for its tables ends unwritten (`why`): a member was lost, a table bucket
// failed, or (checked every tick) the deadline passed. Member 0 goes on.
void abandon_tables_save(self_ptr self, const job_config& config, const caf::error& why);
void check_tables_deadline(self_ptr self, const job_config& config);

// -- dp_standing.cpp
// Starts this coordinator from config.takeover: the old primary's state, its members to rejoin.
void take_over(self_ptr self, const job_config& config);
// A member rejoins after the takeover (answered once all are back or at the deadline).
caf::result<wire> rejoin(self_ptr self, const job_config& config, const wire& w,
                         dp_worker_actor handle);
// After a takeover (and, with --mode hybrid, once the tables are served again): the members
// back form a new generation, and their rejoins are answered.
void form_after_takeover(self_ptr self, const job_config& config);

// -- dp_tables.cpp (--mode hybrid)
// Pulls the rows evaluation reads from the table buckets into input->rows, then `then`; a
// bucket that does not answer fails the job.
void pull_evaluation_rows(self_ptr self, const job_config& config,
                          std::shared_ptr<eval_input> input, std::function<void()> then);
// The tables are ready (placed, or every bucket served again after a takeover): the group
// forms once its members have joined, or the takeover ends once they are back.
void on_tables_ready(self_ptr self, const job_config& config);

}  // namespace troupe::dp_plan
