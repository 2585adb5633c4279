// The state of one parameter bucket without the actor around it: its slices, optimizer state,
// vector clock, consistency gate, delay-compensation memory and counters. apply() validates a
// push against the slices this bucket owns before touching anything, so a rejected push
// leaves the parameters exactly as they were. Owned by one parameter_bucket actor (or a
// test); not thread-safe.
//
// Its sources, by concept: bucket_store.cpp (construction, pulls, workers joining and leaving,
// statistics), bucket_store_push.cpp (a push from apply() to the optimizer's kernel: checks,
// clocks and rounds, the step, delay compensation), bucket_store_state.cpp (copies for
// backups, checkpoints and restores), bucket_store_rule.cpp (an app's rule, undone when it
// refuses) and bucket_store_dash.cpp (DASH steps on a device).
//
// Memory: values + optimizer state (2x for Adam, 1x for momentum; DASH adds B x B statistics
// and roots per block, at most about 4 rows x B per matrix slice) per slice; with delay
// compensation, one copy of the bucket per worker (what that worker last read), plus one
// running mean of g*g for the adaptive form; with bsp, one round sum.
#pragma once

#include <caf/expected.hpp>

#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>

#include "actors/bucket/batch_record.hpp"
#include "actors/bucket/clock_gate.hpp"
#include "actors/bucket/sparse_table.hpp"
#include "kernels/adam_hyper.hpp"
#include "kernels/cpu/dash.hpp"
#include "kernels/cpu/dash_pack.hpp"
#include "messages/codec.hpp"
#include "messages/types.hpp"

namespace troupe {

// Gradient values beyond this are refused like NaN/Inf: no single step of Adam or momentum SGD
// can then overflow fp32 and leave non-finite parameters behind.
constexpr float max_abs_gradient = 1e15f;

// Staleness values counted one by one in the histogram; larger ones share the last entry.
constexpr size_t staleness_histogram_size = 65;

class bucket_store {
 public:
  // Takes the slices and their initial values from `spec`; an app's update rule (optimizer
  // kind app) from `rules`: check_rule(spec.optimizer, rules) first, since without its rule
  // the bucket refuses every push.
  explicit bucket_store(bucket_spec spec, const update_rules& rules = update_rules{});

  uint32_t id() const { return id_; }
  uint32_t workers() const { return workers_; }
  bool has_tables() const { return !tables_.empty(); }
  std::vector<std::string> table_names() const;

  // Applies (async, ssp) or collects (bsp) one gradient push, dense or sign-compressed (one
  // sign tensor per slice); errc::unknown_bucket,
  // shape_mismatch, malformed_message or non_finite on a push that does not fit, counted as
  // rejected. A push with `last` set retires its worker from the consistency gate. A push
  // (or bsp round) that an app's rule makes non-finite anywhere is not applied at all:
  // errc::non_finite, counted as rejected; the worker's clock moves as for a skipped step.
  // `views`: the dense gradients where the push's message holds them (decode_push_in_place),
  // one per push.dense; empty: push.dense's own values.
  caf::expected<push_ack> apply(push_request push, std::vector<std::span<const float>> views = {});

  // Whether `push` was already applied (or counted) here. A worker resends a push whose ack it
  // never got (its bucket restarted, or a backup took over); apply() acknowledges a resent
  // duplicate without applying it twice.
  bool duplicate(const push_request& push) const;

  // Whether `push` names batches this bucket already counted, pushed by any worker (a lost
  // worker's chunk done again by another). apply() acknowledges it without applying it, counts
  // it as a duplicate push, and moves the worker's clock as for a skipped step.
  bool batches_counted(const push_request& push) const;

  // Pushes acknowledged without being applied: their batches were counted here already.
  uint64_t duplicate_pushes() const { return duplicates_; }

  // The bytes of the record of counted batches as saved (checkpoints, backups).
  uint64_t batch_record_bytes() const { return counted_batches_.saved_bytes(); }

  // Counts a push that failed before it could be decoded.
  void count_rejected() { ++rejected_; }

  // Whether a pull by a worker that has pushed `worker_clock` times may be answered now.
  bool pull_allowed(uint32_t worker, uint64_t worker_clock) const;

  // The reply to an allowed pull; remembers what `worker` read when compensation or selective
  // sync needs it. With selective sync (after the first pull) only rows that moved by more
  // than the threshold since the worker last got them are sent, as row ranges of the slices.
  pull_reply grant_pull(uint32_t worker, uint64_t worker_clock);

  // The same, with the tensors left out when they are the whole slices as they are now
  // (`whole` set): the caller encodes slices() straight into its message instead of copying.
  struct granted_pull {
    pull_reply reply;
    bool whole = false;
  };
  granted_pull grant(uint32_t worker, uint64_t worker_clock);

  // A worker that finished or was lost no longer holds back the others. Under bsp that may
  // close a round; the error of an app's rule that refused it comes back (nothing applied).
  caf::error retire(uint32_t worker);

  // Makes room for a worker that joins a running job (rank `worker`, the next one) and
  // returns the clock it starts at: the slowest live worker's, so that ssp and bsp neither
  // wait for it to catch up from 0 nor let it run ahead.
  uint64_t admit(uint32_t worker);

  // A worker of a resumed job takes rank `worker` again (or joins, for a new rank); returns the
  // clock it starts at. Its earlier pushes no longer count as resends.
  uint64_t rejoin(uint32_t worker);

  // The whole state as messages, for a checkpoint or a new backup: first the bucket_spec
  // (configuration, the slices' shapes, worker count), then bucket_state_parts, each well
  // under the codec's caps.
  std::vector<wire> save() const;

  // The same messages, each handed to `put` as soon as it is made, so that a checkpoint or a
  // hand-over holds one part at a time; the first error `put` returns stops it. With
  // `arrays_apart` the ranged parts of arrays() are left out: the caller moves those arrays
  // as they are (bucket_restorer's arrays() on the other side).
  caf::error save_each(const std::function<caf::error(wire)>& put, bool arrays_apart = false) const;

  // The same messages as functions that make each when called, in order: a sender that waits
  // for each part to arrive holds one at a time. The bucket must not change, nor move, until
  // the last is made.
  std::vector<std::function<wire()>> save_plan(bool arrays_apart = false) const;

  // save()'s first message: the configuration and the slices' shapes (no values).
  wire saved_spec() const;

  // Every per-slice array of the state that save() cuts into ranges, in one fixed order: the
  // values, then each kind the bucket keeps (moments, compensation's running means, a bsp
  // round's sums, each worker's read copies), slice by slice.
  std::vector<std::span<const float>> arrays() const;

  // Rebuilds a bucket from save()'s messages (bucket_restorer, one at a time);
  // errc::shape_mismatch or malformed_message when a part does not fit the spec (nothing
  // half-restored is returned).
  static caf::expected<bucket_store> restore(const std::vector<wire>& saved,
                                             const update_rules& rules = update_rules{});
  // The app rules this bucket was made with (its own, when it has one).
  update_rules rules() const;

  // The embedding rows a pull asks for (created on first read, as each table's admission
  // allows); errc::unknown_bucket or message_too_large for rows this bucket does not own or has
  // no room for. With delay compensation, what `worker` read is remembered (replacing what it
  // read before), so that its next push of those rows is compensated as dense slices are; an
  // observer's read is not, and changes nothing. A primary's read may evict rows
  // (take_evictions); a backup's `mirrored` read of the same pull never does: it evicts what
  // its primary did first (evict_rows).
  caf::expected<std::vector<sparse_rows>> read_rows(const std::vector<row_request>& requests,
                                                    uint32_t worker = observer_worker,
                                                    bool mirrored = false);
  // --export-dir (config().export_dir): the tables' rows changed since the last cut, and the
  // ids evicted, as file `sequence` of `generation` (every row with `snapshot`).
  delta_file cut_delta(uint64_t generation, uint64_t sequence, bool snapshot);
  const bucket_spec& config() const { return config_; }

  // The rows evicted since the last call, per table (for the pull's mirror to the backups).
  std::vector<row_request> take_evictions();
  // A backup evicting what its primary did; errc::shape_mismatch for an unknown table.
  caf::error evict_rows(const std::vector<row_request>& evicted);

  pull_reply snapshot() const;
  bucket_stats stats() const;
  // stats()'s tables alone (for metrics after every pull and push, without the rest).
  std::vector<table_counters> tables_counted() const;

  // The update-variance diagnostic: the variance of the norms of the last update_window
  // applied gradients over their squared mean (0 with fewer than two). High values mean that
  // pushes disagree in size, as when stale or diverging workers mix in.
  double update_variance() const;
  static constexpr size_t update_window = 256;

  // --optimizer dash: blocks reset so far because a value went non-finite.
  uint64_t dash_resets() const { return dash_resets_; }

  // --dash-device gpu (actors/bucket/bucket_store_dash.cpp). While on, the DASH steps of slices
  // that the GPU can step (kernels::gpu_can_step, packages up to kernels::max_packed_bytes) are
  // deferred instead of run: the owner hands each to the device and completes it, or runs it
  // here, before anything reads the parameters again (save() and pulls must not see deferred
  // steps). Runs any step still deferred first; returns whether any slice defers.
  bool defer_dash(bool on);
  bool dash_pending() const { return !deferred_.empty(); }
  size_t dash_slices() const;    // slices stepped by DASH (the others by Adam)
  size_t device_slices() const;  // of those, the ones whose steps are deferred now
  // The oldest deferred step, packed for the device; dash_pending() must hold. It packs into
  // the values of the last completed package when nobody else holds them (a fresh array of
  // tens of MiB costs more in page faults than the copies into it).
  kernels::packed_dash_step pack_deferred_dash();
  // Writes back the device's result of the oldest deferred step and retires it, and keeps the
  // package's values for the next pack (`done` is spent). An error (a package that does not
  // fit, non-finite values) writes nothing and leaves the step pending.
  caf::error complete_deferred_dash(kernels::packed_dash_step& done);
  // Runs every deferred step on the CPU, oldest first.
  void run_deferred_dash();
  const std::vector<dense_tensor>& slices() const { return slices_; }

  // --mode dp's 1-bit and 0/1 Adam (actors/dp/compression/compressed_adam.hpp) step the slices of
  // an Adam bucket themselves: slice s's values and moments, to change in place.
  struct adam_view {
    std::span<float> values, m, v;
  };
  // --mode dp's model buffers (BatchNorm's running statistics) are set, not stepped: slice s's
  // values, to overwrite in place.
  std::span<float> set_values(size_t s) { return slices_[s].values; }
  adam_view adam_state(size_t s) {
    return {slices_[s].values, first_moment_[s], second_moment_[s]};
  }
  // --mode dp: a whole state rebuilt from a checkpoint of sharded state goes on from the steps
  // its moments took (Adam's bias correction).
  void set_version(uint64_t applied) { version_ = applied; }

 private:
  // A push's dense gradients, one per slice.
  using gradients = std::span<const std::span<const float>>;
  // A sign-compressed push becomes a dense one (one sign tensor per slice, nothing else).
  caf::error expand_signs(push_request& push) const;
  // Checks a push against the bucket; its dense gradient's squared norm when it passes (the
  // bound check and the norm are one pass over the gradient).
  caf::expected<double> validate(const push_request& push, gradients grads) const;
  bool counts_as_step(const push_request& push) const;
  caf::error skip_step(uint32_t worker);
  // Compensates grad, the values [first, first + grad.size()) of a slice.
  void compensate(uint32_t worker, size_t slice, size_t first, std::span<float> grad);
  // Delay compensation of a push's row gradients against the rows the worker last read.
  void compensate_rows(uint32_t worker, std::vector<sparse_rows>& rows);
  void remember_rows(uint32_t worker, const std::vector<sparse_rows>& rows);
  // False when an app's rule left the slice unchanged (non-finite result).
  bool step(size_t slice, std::vector<float>& grad, uint64_t staleness);
  // The optimizers that update each value on its own (sgd, momentum, adam, adamw): a slice can
  // be compensated and stepped block by block, each block in the cache between the two.
  bool elementwise() const;
  void step_elements(size_t slice, size_t first, std::span<const float> grad, float lr);
  // Adam's or AdamW's hyper-parameters for this version's step at `lr`.
  kernels::adam_hyper adam_step_hyper(float lr) const;
  // Adam or AdamW with dcasgd compensation: fused into one kernel (adam_dcasgd_step).
  bool adam_dcasgd() const;
  // Compensates and steps one slice of a push (its gradient is not changed: compensation
  // works on a copy, block by block where the optimizer allows).
  bool compensate_and_step(uint32_t worker, size_t slice, std::span<const float> grad,
                           uint64_t staleness);
  bool compensates(uint32_t worker) const;  // delay compensation applies to its pushes
  float step_lr(uint64_t staleness) const;
  bool device_steps(size_t slice) const;  // this slice's DASH step is deferred
  caf::error apply_now(push_request& push, gradients grads, uint64_t staleness);
  void collect_round(const push_request& push, gradients grads);
  caf::error finish_round_if_complete();
  caf::error rule_refused(uint64_t slices, uint64_t rows) const;
  // --optimizer NAME: everything a push or round may change, kept to undo it whole when the
  // app's rule makes any value non-finite (none for other optimizers).
  struct rule_undo {
    std::vector<std::vector<float>> theta, m, v;
    std::vector<std::pair<size_t, sparse_table::row_copies>> rows;  // table index, its rows
  };
  std::optional<rule_undo> remember_for_rule(
      const std::vector<std::pair<size_t, std::vector<uint64_t>>>& rows) const;
  void undo_rule(rule_undo& undo);
  std::vector<std::pair<size_t, std::vector<uint64_t>>> row_ids_of(
      const std::vector<sparse_rows>& rows) const;
  void record(uint64_t staleness);
  void observe_norm(const push_request& push, double dense_squares);
  std::vector<dense_tensor> changed_rows(uint32_t worker);
  sparse_table* table(const std::string& name);
  const sparse_table* table(const std::string& name) const;
  uint64_t apply_rows(const std::vector<sparse_rows>& rows, float lr_scale);
  void counted(const push_request& push);
  bucket_counters counters() const;
  friend class bucket_restorer;
  // Where each slice's next saved range must begin, per (kind, worker) of ranged parts.
  using range_cursors = std::map<std::pair<uint8_t, uint32_t>, std::vector<uint64_t>>;
  // arrays()'s, to write into (a restorer's arrays apart).
  std::vector<std::span<float>> mutable_arrays();
  // Each ranged kind the bucket keeps, in arrays()'s order: its kind, worker and per-slice values.
  using array_visitor =
      std::function<void(bucket_state_part::kind, uint32_t, std::vector<std::span<const float>>)>;
  void each_array_kind(const array_visitor& visit) const;
  caf::error restore_part(bucket_state_part part, range_cursors& cursors);
  caf::error restore_ranges(bucket_state_part& part, range_cursors& cursors);
  void plan_dash(std::vector<std::function<wire()>>& plan) const;
  caf::error restore_dash(const bucket_state_part& part);

  bucket_spec config_;  // as placed, without the values (saved with the state)
  uint32_t id_;
  uint32_t workers_;
  optimizer_config optimizer_;
  std::optional<update_rule> rule_;  // --optimizer NAME: the app's rule
  compensation_config compensation_;
  clock_gate gate_;
  std::vector<dense_tensor> slices_;
  std::vector<std::vector<float>> first_moment_;   // Adam m, or the momentum velocity
  std::vector<std::vector<float>> second_moment_;  // Adam v
  // --optimizer dash: per slice, its block-Shampoo state (none for vectors: AdamW).
  std::vector<std::optional<kernels::dash_matrix>> dash_;
  uint64_t dash_resets_ = 0;  // DASH blocks reset for non-finite values
  struct deferred_step {
    size_t slice;
    std::vector<float> grad;
    uint64_t step;
    float lr;
  };
  bool defer_dash_ = false;
  std::deque<deferred_step> deferred_;                 // at most one per slice per push or round
  std::shared_ptr<std::vector<float>> spare_package_;  // a spent package's values, for reuse
  // [worker][slice]: the values the worker holds (what it last read), kept for delay
  // compensation and for selective sync.
  std::vector<std::vector<std::vector<float>>> read_;
  float sync_threshold_ = 0;
  std::vector<std::vector<float>> mean_square_;  // adaptive DC: running mean of g*g
  // Delay compensation of rows: [worker][table] the rows it last read (id -> values), and
  // [table] each row's running mean of g*g for the adaptive form. A backup reads the same
  // rows when a pull is mirrored to it; neither is saved with the state, so after a restart
  // from a checkpoint a worker's first push of a row is not compensated.
  std::vector<std::vector<std::unordered_map<uint64_t, std::vector<float>>>> rows_read_;
  std::vector<std::unordered_map<uint64_t, std::vector<float>>> row_mean_square_;
  std::vector<std::vector<float>> round_sum_;  // bsp: this round's summed gradients
  // bsp: who pushed (or skipped) this round.
  static constexpr uint8_t round_none = 0, round_pushed = 1, round_skipped = 2;
  std::vector<uint8_t> in_round_;
  std::vector<sparse_table> tables_;  // this bucket's share of each table
  // bsp: this round's summed row gradients, per table.
  std::vector<std::unordered_map<uint64_t, std::vector<float>>> round_rows_;
  vector_clock clock_;
  uint64_t version_ = 0;
  uint64_t applied_ = 0;
  uint64_t rejected_ = 0;
  uint64_t max_staleness_ = 0;
  uint64_t staleness_sum_ = 0;
  uint64_t max_clock_gap_ = 0;
  std::vector<uint64_t> histogram_;
  std::vector<uint64_t> next_push_;  // per worker: the push clock expected next
  uint64_t skipped_ = 0;             // pushes with nothing to apply
  uint64_t duplicates_ = 0;          // pushes of batches already counted: acknowledged only
  batch_record counted_batches_;     // the batches counted here, whichever worker pushed them
  // Diagnostics only (not saved: a restored bucket starts them afresh).
  std::vector<double> norms_;  // the last update_window gradient norms, a ring
  size_t next_norm_ = 0;
};

// Rebuilds a bucket from save_each()'s messages as they come, holding one at a time besides the
// bucket it builds: begin() with the spec (the first message), add() each part in order, then
// finish(). With `arrays_apart`, the caller fills arrays() (checked against what it was
// sent) between the parts and finish().
class bucket_restorer {
 public:
  static caf::expected<bucket_restorer> begin(const wire& spec, const update_rules& rules = {},
                                              bool arrays_apart = false);
  // The same into `existing`, whose saved_spec() is `spec` byte for byte (the same
  // configuration and shapes): its memory is reused, nothing new is allocated; its state is
  // overwritten part by part.
  static caf::expected<bucket_restorer> over(bucket_store existing, const wire& spec,
                                             bool arrays_apart = false);
  caf::error add(const wire& part);
  // The new bucket's arrays, in bucket_store::arrays()'s order.
  std::vector<std::span<float>> arrays() { return store_->mutable_arrays(); }
  // The bucket, once every ranged kind came whole (errc::corrupt_data otherwise).
  caf::expected<bucket_store> finish();

 private:
  bucket_restorer(bucket_store store, bool values_follow, bool arrays_apart)
      : store_(std::move(store)), values_follow_(values_follow), arrays_apart_(arrays_apart) {}
  std::optional<bucket_store> store_;
  bucket_store::range_cursors cursors_;
  bool values_follow_ = true;
  bool arrays_apart_ = false;
};

}  // namespace troupe
