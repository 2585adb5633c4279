// Internal to the dp_trainer (actors/dp/trainer/dp_trainer.cpp, dp_trainer_step.cpp): the functions
// its two files share. Nobody else calls them.
#pragma once

#include <functional>
#include <string>

#include "actors/dp/trainer/dp_trainer.hpp"

namespace troupe::dp_parts {

using self_ptr = dp_worker_actor::stateful_pointer<dp_trainer_state>;

// The coordinator this member answers to now.
inline dp_coordinator_actor coordinator_of(const dp_trainer_config& config) {
  return caf::actor_cast<dp_coordinator_actor>(config.coordinator->handle());
}

// -- dp_trainer_rejoin.cpp (a standby coordinator)
// Sends the step report of `step` to the coordinator, held for a takeover if a standby is listed.
void send_report(self_ptr self, const dp_trainer_config& config, uint64_t step, wire report);
// Sends part `part` of the parameters after `epoch` (a pull_reply) for evaluation, held
// likewise; `then` runs once the coordinator has it (true) or did not answer (false).
void send_parameters(self_ptr self, const dp_trainer_config& config, uint32_t epoch, uint32_t part,
                     wire parameters, std::function<void(bool delivered)> then);
// The coordinator's standby holds the reports through `reports_through` and `evaluated` epochs.
void drop_held(dp_trainer_state& st, uint64_t reports_through, uint32_t evaluated);
// The process's watch found the coordinator of `term` (0: none): rejoin it and send again what
// is held, or stop.
void rejoin(self_ptr self, const dp_trainer_config& config, uint64_t term);

// Stops the trainer with errc::job_failed: `doing`: `err`.
void fail(self_ptr self, const dp_trainer_config& config, const std::string& doing,
          const caf::error& err);

// After a step: evaluation after an epoch, a pending generation, the next step or done.
void go_on(self_ptr self, const dp_trainer_config& config, bool snapshot);

// A collective of this generation failed: wait, within a bound, for the coordinator's next.
void wait_for_generation(self_ptr self, const dp_trainer_config& config, const std::string& why);

// The buffers a generation's size decides: the step's values (their meta holds a rate per
// member) and the error feedback of 1-bit sums, which start at zero.
void size_buffers(dp_trainer_state& st);

// -- dp_trainer_store.cpp: the parameters and the optimizer's state
// Makes the member's one-bucket store (flat for element-wise optimizers) and fills its
// parameters with the task's initial values.
caf::error make_store(dp_trainer_state& st, const dp_trainer_config& config,
                      const group_start& job);
// Points st.params at the store's values (a flat store), or at a flat copy of its slices.
void bind_params(dp_trainer_state& st);
// A checkpoint's store (st.resumed) in place of the member's own.
caf::error take_resumed(dp_trainer_state& st);
// Steps the store with the summed gradient (read where it is, never copied).
caf::error step_store(dp_trainer_state& st, std::span<const float> grad);

// -- dp_trainer_shards.cpp: sharded optimizer state (--zero-stage 1)
// The optimizer whose store holds the parameters alone (their state is in the shard).
optimizer_config parameters_only(optimizer_config o);
// Makes the member's sharded state, holding no pieces yet (the first agreement cuts them), or
// a resumed checkpoint's: the pieces restored (st.pieces_restored), or cut from the whole
// moments of a store saved under --zero-stage 0.
caf::error make_shard(dp_trainer_state& st, const dp_trainer_config& config,
                      const group_start& job);
// --shard-backups 0, a member lost: the coordinator restored the last checkpoint into this
// member before the new generation's start; its parameters and pieces replace the member's,
// and it goes on from that step.
caf::error go_back(dp_trainer_state& st, const dp_trainer_config& config);
// A checkpoint after this step: member 0's parameters (st.checkpoint_parts) and this member's
// own pieces (st.checkpoint_pieces), to be sent once the step settles.
void plan_sharded_checkpoint(dp_trainer_state& st);
// The cut of the pieces that `job` gives this member.
piece_cut cut_of(const group_start& job);
// The ranges of the flat values that the step's gradient buckets cover, in order.
std::vector<flat_range> bucket_ranges(const std::vector<gradient_bucket>& buckets);
// The gradient buckets of `job` (its bucket size, the tensors it keeps at fp32) over `layout`.
caf::expected<std::vector<gradient_bucket>> gradient_buckets_of(const flat_layout& layout,
                                                                const group_start& job);
// A new flat store of the parameters alone (--zero-stage 1 and 2), holding `params`.
void keep_parameters_only(dp_trainer_state& st, const dp_trainer_config& config,
                          const group_start& job);
// Whether the summed gradient of this member's own pieces may be applied: finite and within
// max_abs_gradient (the holders of backups see the same sums, checked by their owners).
bool shard_sum_usable(dp_trainer_state& st);
// Steps the held pieces of gradient bucket `bucket`, in the parameters, with their summed
// gradient, as the pieces' next update (their version moves once every bucket is stepped).
void step_shard_bucket(dp_trainer_state& st, size_t bucket);
// The step in flight (st.step + 1) is taken by every member: applied, or skipped.
void took_step(dp_trainer_state& st, bool applied);
// A step broke: the sums of its held pieces, if complete, are kept for a roll forward.
void keep_pending_sums(dp_trainer_state& st);

// -- dp_trainer_streamed.cpp: --zero-stage 2, the gradient put into reused bucket buffers
// Makes the member's bucket buffers (after make_shard and find_model_buffers).
void make_streamed(dp_trainer_state& st);
// This member's share's gradient, each tensor put into its buckets' buffers as the task
// finishes it and then told to `tell` (the tensors not put are zeros); the pieces' pending
// sums sized for the step. Returns the share's mean loss.
caf::expected<double> streamed_share_gradient(self_ptr self, const dp_trainer_config& config,
                                              example_range share, uint32_t epoch,
                                              const std::function<void(size_t)>& tell);
// Bucket b's values, in the buffer they were put in.
std::span<float> streamed_bucket(dp_trainer_state& st, size_t b);
// Bucket b's order (its data set) takes its buffer, and copies the sums of the pieces held
// out of it once summed, on the group's thread.
void hand_over_bucket(dp_trainer_state& st, size_t b, reduce_order& order);
// The model buffers' values put in the step in flight, one after another.
std::span<float> streamed_model_buffers(dp_trainer_state& st);

// -- dp_trainer_buffers.cpp: the model's buffers (tensor_spec::buffer), which follow DDP
// Finds the layout's buffer tensors (st.model_buffers, st.is_model_buffer), before size_buffers.
void find_model_buffers(dp_trainer_state& st);
// After the share's forward and backward: the buffers' new values leave `grad` (the optimizer
// sees zeros there; under --zero-stage 2 they were put aside and `grad` is empty); member 0 puts
// its own into the step's meta (its values before the step when it computed no examples), the
// others zeros. False when member 0's are not finite.
bool send_model_buffers(dp_trainer_state& st, std::span<float> grad, bool computed);
// The model's buffers in the step's summed meta (member 0's).
std::span<const float> summed_model_buffers(const dp_trainer_state& st);
// After the sum is applied: every member's buffers become the meta's (member 0's), in the
// parameters and in the optimizer's store.
void adopt_model_buffers(dp_trainer_state& st);

// The report of step st.step, which this member computed (st.mine, its loss and collectives).
step_report report_of(const dp_trainer_state& st, bool skipped, double exposed_s,
                      uint64_t checksum);

// One step: compute this member's share, send its buckets, apply the sum (dp_trainer_step.cpp).
void run_step(self_ptr self, const dp_trainer_config& config);

// --mode hybrid: a row push is acknowledged (or refused for good); the last one settles the
// step that waits for them (dp_trainer.cpp).
void table_push_done(self_ptr self, const dp_trainer_config& config);
// The step's rows are in the tables (at once without tables): its report goes, then member 0's
// checkpoint if one is due, then the next step (dp_trainer_step.cpp).
void on_step_settled(self_ptr self, const dp_trainer_config& config);

// -- dp_trainer_tables.cpp (--mode hybrid)
// Opens a direct connection to each server in `servers` ("HOST:PORT,...") not yet connected,
// so that the table buckets' traffic never goes through a coordinator's node (and survives
// its loss). Blocks this detached trainer for the set-up; a server it cannot reach directly
// is still reached the other way.
void connect_table_servers(self_ptr self, const dp_trainer_config& config,
                           const std::string& servers);
// The table buckets are `buckets` from now on (the first: the client of them is made).
void use_table_buckets(self_ptr self, const dp_trainer_config& config,
                       std::vector<bucket_actor> buckets);
// Pulls the rows examples `share` of `epoch` read from the table buckets into st.rows (the
// client keeps their read clocks), then `then`.
void pull_share_rows(self_ptr self, const dp_trainer_config& config, example_range share,
                     uint32_t epoch, std::function<void()> then);
// Computes st.rows' gradients into st.rows_due, one push per bucket that owns some, named
// by the share's examples of `epoch` (each bucket applies a share's rows at most once).
void prepare_share_rows(dp_trainer_state& st, example_range share, uint32_t epoch);
// Sends st.rows_due (once the step is applied; as skipped pushes when every member skipped
// it); each acknowledgement is one of st.table_pushes_due.
void push_share_rows(self_ptr self, const dp_trainer_config& config, bool skipped);

}  // namespace troupe::dp_parts
