// dp_trainer: one member of a data-parallel job (--mode dp). It joins the coordinator, and
// once started holds a full replica of the model: every step it computes the gradient of its
// share of the step's examples (actors/dp/trainer/dp_schedule.hpp), hands the gradient to its
// allreduce_group bucket by bucket (while backward still runs, unless --no-overlap), and when
// every bucket is summed over the members applies the same optimizer step as every other
// member (a one-worker bucket_store holds the parameters and the optimizer state), so the
// replicas stay identical. A step in which any member's gradient is not finite is skipped by
// all. It reports each step to the coordinator, sends its parameters after each epoch for
// evaluation, and says done after the last step. When a collective fails (a member is gone
// or late) it abandons the step and tells the coordinator; on a new generation it forms the
// group again, and the members go on from the state of the one that applied the most steps
// (allreduce_group's sync). A new worker joins the same way. With a standby coordinator
// listed, it holds its step reports and parameters until the coordinator says its standby has
// them, and when the standby takes over it rejoins it, sends again what it holds and goes on in
// the generation the new coordinator forms. Spawn it detached: gradient_range runs inside its
// handler.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/bucket/bucket_store.hpp"
#include "actors/dp/compression/adam_replica.hpp"
#include "actors/dp/trainer/allreduce_group.hpp"
#include "actors/dp/trainer/bucket_buffers.hpp"
#include "actors/dp/trainer/dp_schedule.hpp"
#include "actors/dp/trainer/piece_agreement.hpp"
#include "actors/dp/trainer/piece_checkpoint.hpp"
#include "actors/supervision/failure/coordinator_link.hpp"
#include "actors/transport/bucket_client.hpp"
#include "messages/protocol.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/log.hpp"
#include "troupe/task.hpp"

namespace troupe {

struct dp_trainer_config {
  coordinator_link_ptr coordinator;  // the process's (it switches at a takeover)
  std::shared_ptr<const training_task> task;
  std::string name;
  std::string bind_host = "127.0.0.1";  // where the other members' collectives reach ours
  std::string host_label;               // the host it counts as (two-level reduction)
  std::chrono::seconds request_timeout{30};
  caf::actor_addr supervisor;
  logger log;
  update_rules rules;  // the app's (--optimizer NAME)
  // The cluster secret a data lane to a table server proves (--mode hybrid); empty: no lanes,
  // the tables' rows go over CAF.
  std::string lane_secret;
};

// Where in the values [meta | gradient] of one step the member's own figures go; they
// travel in the last bucket, summed like the gradient, always in fp32. After the fixed ones
// come one slot per member for its measured compute seconds per step (--balance): each member
// fills its own, so the sum tells every member everyone's.
// meta_refused: members whose piece of a sharded sum (--zero-stage 1) is not usable;
// meta_checkpoint: with sharded state, member 0 asks every member to save its pieces after
// this step (the console's checkpoint), so that all save the same step.
enum step_meta : size_t {
  meta_examples = 0,
  meta_loss = 1,
  meta_non_finite = 2,
  meta_refused = 3,
  meta_checkpoint = 4,
  meta_size = 5
};

// --zero-stage 2 (dp_trainer_streamed.cpp): no whole gradient; each tensor's is put into the
// buffer of its bucket (a few, reused: bucket_buffers) as backward finishes it, and each
// bucket's sums of the pieces held are copied out (into the pieces' pending sums) once
// reduce-scattered, and its buffer reused.
struct streamed_gradient {
  std::shared_ptr<bucket_buffers> pool;
  std::vector<std::shared_ptr<bucket_buffers::lease>> leases;  // per bucket, while it fills
  std::vector<bool> put;             // per tensor: put in the step in flight
  std::vector<float> model_buffers;  // the buffer tensors' values put, in st.model_buffers order
  std::vector<uint64_t> buffer_at;   // per tensor: where a buffer's values are in model_buffers
  std::vector<float> whole;  // a task that does not stream: its whole gradient, put from here
  caf::error failed;         // a put not taken (the step fails with it)
};

// --zero-stage 1 (dp_trainer_shards.cpp): this member's pieces of the optimizer's state (its own
// and, with --shard-backups, the ones it keeps for others; piece_agreement.hpp), which it
// steps in place in the parameters from their sums, which the reduce-scatter leaves in place
// in the step's gradient (or, under --zero-stage 2, copies into the pieces' pending sums).
struct sharded_state {
  // The pieces, their step and what a roll forward needs; with the group during an agreement.
  std::shared_ptr<piece_exchange> pieces;
  uint64_t computed_step = 0;  // the step whose share this member computed and sent
  // While the parameters are all-gathered after a step, or written by an agreement: their
  // store, shared with the orders that write into it (taken back into st.optimizer after).
  std::shared_ptr<bucket_store> borrowed;
  enum class phase : uint8_t { reducing, meta, gathering } now = phase::reducing;
  std::optional<streamed_gradient> streamed;  // --zero-stage 2: the sums are in pieces->pending
  bool save_asked = false;  // the step's meta asked every member for a checkpoint after it
};

// A generation's error-feedback buffers of 1-bit sums (shared with the reduce orders, as the
// values are): per gradient value, and per bucket the chunk this member owns.
struct feedback_buffers {
  std::vector<float> worker;
  std::vector<float> server;
  std::vector<size_t> server_offsets;  // per bucket: where its chunk's errors begin
};

struct dp_trainer_state {
  static inline const char* name = "troupe.dp_trainer";
  std::optional<group_start> job;
  std::optional<flat_layout> layout;
  std::unique_ptr<task_replica> replica;
  // The parameters and the optimizer's state (dp_trainer_store.cpp); none while a generation's
  // agreement holds it, or after a hand-over into it failed (spoiled).
  std::optional<bucket_store> optimizer;
  placement optimizer_plan;                // one bucket: every tensor whole
  bool flat_store = false;                 // the store is one flat slice, st.params its values
  std::vector<dense_tensor> store_shapes;  // the store's slices, without values
  bool spoiled = false;                    // the store was lost in a hand-over
  std::optional<adam_replica> adam;        // 1-bit / 0/1 Adam: their stages' steps
  // --zero-stage 1: this member's pieces (st.optimizer then holds the parameters only)
  std::optional<sharded_state> shard;
  bool step_skipped = false;  // the step in flight was skipped by every member
  allreduce_group_actor group;
  std::span<float> params;         // the model's values, flat, in the layout's order
  std::vector<float> params_copy;  // a store per tensor: the flat values the task reads
  // [meta | gradient] of the step in flight; shared with the group's reduce orders, so that a
  // bucket still being sent when this trainer stops does not point into freed memory
  std::shared_ptr<std::vector<float>> values;
  // meta_size + one rate per member of this generation + the model's buffers (member 0's
  // after its forward pass: summed with the others' zeros, every member gets them)
  size_t meta_len = meta_size;
  std::vector<flat_range> model_buffers;  // the task's buffer tensors in the flat vector
  uint64_t model_buffer_values = 0;
  std::vector<bool> is_model_buffer;  // per tensor
  std::shared_ptr<feedback_buffers> feedback;
  std::vector<float> micro;  // --accumulate: one micro-batch's gradient
  std::vector<gradient_bucket> buckets;
  std::vector<size_t> waiting_for;  // per bucket: tensors not yet final (+1 meta, the last)
  std::vector<bool> tensor_final;   // per tensor: told final in this step
  size_t next_bucket = 0;           // the next bucket to send (they go in order)
  size_t replies_due = 0;
  uint64_t examples = 0;  // in one epoch
  uint64_t steps_per_epoch = 0;
  uint64_t step = 0;                    // global steps done
  adam_stage stage = adam_stage::full;  // of the step in flight
  uint32_t mine = 0;                    // examples this member computes in the step in flight
  double own_loss_sum = 0;
  bool own_non_finite = false;     // this member's loss or gradient was not finite this step
  throttled_warning skip_warning;  // says skipped steps at the first, then once a minute
  uint64_t step_examples = 0;      // examples of the whole step, over every member
  // --balance: the members' weights (empty: an even split), and this member's running mean
  // of its step's compute seconds (slowdown included), which it sends in the meta
  std::vector<double> weights;
  double own_seconds = 0;
  // 0/1 Adam: examples since the last synchronisation, this member's and everyone's
  uint64_t mine_since_sync = 0, examples_since_sync = 0;
  double step_allreduce_s = 0;
  uint64_t step_bytes = 0;
  uint64_t step_bytes_inter_host = 0;
  double compute_s = 0;
  std::chrono::steady_clock::time_point started, backward_done;
  uint64_t total_steps = 0;            // epochs x steps_per_epoch
  bool in_step = false;                // a step's buckets are with the group
  bool broken = false;                 // a collective of this generation failed
  bool forming = false;                // this generation's group is forming and agreeing
  std::optional<group_start> pending;  // a new generation, formed once the step settles
  // --resume: the checkpoint's state, restored part by part as the coordinator sends it
  // before the first start, and the step it was saved after.
  std::optional<bucket_restorer> resuming;
  std::optional<bucket_store> resumed;
  caf::error resume_failed;
  uint32_t resume_next = 0;  // the index of the part expected next
  uint64_t restored_step = 0;
  // --resume with --zero-stage 1 or 2, a checkpoint of sharded state: the pieces of the cut the
  // coordinator's header named (piece_checkpoint.hpp), filled record by record, and once whole.
  std::optional<piece_restorer> restoring_pieces;
  std::optional<restored_pieces> pieces_restored;
  uint32_t pieces_next = 0;  // the index of the pieces' part expected next
  bool agreeing = false;     // the store is with the group's agreement (store_pieces)
  // The parts of the epoch's parameters being sent for evaluation, one at a time (no step
  // meanwhile); empty when none are.
  placement evaluation_parts;
  bool stopping = false;
  bool checkpoint_due = false;  // member 0: a save waits for a step that communicated
  // Member 0: the parts of a checkpoint being sent, made one at a time (no step meanwhile);
  // with sharded state, member 0's parameters alone, and every member's own pieces after.
  std::vector<std::function<wire()>> checkpoint_parts;
  std::vector<std::function<wire()>> checkpoint_pieces;
  // The applied step's report, sent once the step settles (its rows in the tables).
  std::optional<std::pair<uint64_t, wire>> report_due;
  // --mode hybrid: the client of the task's embedding tables' buckets (it keeps each bucket's
  // clock at the pull), the tables, and the rows of the step in flight (values pulled,
  // gradients computed)
  std::shared_ptr<bucket_client> table_buckets;
  std::set<std::string> table_servers;  // HOST:PORT of the servers connected to directly
  lane_map table_lanes;                 // data lanes to the table servers that have one
  // Table lookups that wait for this member to rejoin the coordinator that takes over.
  std::vector<std::function<void()>> after_rejoin;
  std::vector<table_spec> tables;
  sparse_rows_view rows;
  // The step's row pushes, one per table bucket, computed with its gradient and sent only once
  // the step is applied (a step abandoned for a new generation sends none, so that a
  // re-formed group cannot push a step's rows twice); and the pushes not yet acknowledged.
  std::vector<std::shared_ptr<push_request>> rows_due;
  uint64_t rows_step = 0;  // the step (1-based) rows_due belong to
  size_t table_pushes_due = 0;
  bool settling = false;  // the step is applied; it settles once its rows are acknowledged
  // With a standby listed: what a coordinator that takes over may not have heard, sent again
  // when this member rejoins it; dropped once the coordinator says its standby holds it.
  std::deque<std::pair<uint64_t, wire>> held_reports;             // step, step_report
  std::map<std::pair<uint32_t, uint32_t>, wire> held_parameters;  // (epoch, part): pull_reply
  bool told_held_full = false;
};

// The most step reports a member holds for a takeover (the oldest go first beyond it).
constexpr size_t max_held_reports = size_t{1} << 14;

dp_worker_actor::behavior_type dp_trainer(dp_worker_actor::stateful_pointer<dp_trainer_state> self,
                                          dp_trainer_config config);

}  // namespace troupe
