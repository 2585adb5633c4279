// The dp_trainer's sharded optimizer state (--zero-stage 1, ZeRO stage 1): each member steps
// only the pieces it holds of every gradient bucket (its own, and with --shard-backups the
// ones it keeps for the members before it), in place in the parameters, from their sums,
// which the reduce-scatter left in place in the step's gradient; the parameters, whole on every
// member, are all-gathered after. A member holds the parameters (4 bytes a parameter), its
// gradient (4) and its pieces' moments (8 / n with Adam, and 8 / n per backup), against 16 for
// a replica. How a new generation agrees on the pieces: piece_agreement.cpp.
#include "actors/dp/trainer/dp_trainer_parts.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_parts {

namespace {

// The step's flat gradient (the sums of the pieces held, once reduce-scattered).
std::span<const float> gradient(const dp_trainer_state& st) {
  return std::span<const float>(*st.values).subspan(st.meta_len);
}

// Where the step's sums of the held pieces are: in place in its gradient, or (--zero-stage 2)
// in the pieces' pending sums, copied out of the bucket buffers.
sum_source sums_of(dp_trainer_state& st) {
  auto& x = *st.shard->pieces;
  if (!st.shard->streamed)
    return [&st](const held_pieces&, const shard_piece& p) {
      return gradient(st).subspan(p.offset, p.count);
    };
  return [&x, bases = pending_bases(x)](const held_pieces& h, const shard_piece& p) {
    return std::span<const float>(
        pending_sum(x, bases, static_cast<size_t>(&h - x.held.data()), p));
  };
}

}  // namespace

optimizer_config parameters_only(optimizer_config o) {
  o.type = optimizer_config::kind::sgd;  // no state: the store holds the values alone
  return o;
}

caf::expected<std::vector<gradient_bucket>> gradient_buckets_of(const flat_layout& layout,
                                                                const group_start& job) {
  std::vector<bool> full_precision(layout.specs.size(), false);
  for (const auto& name : job.compression.skip) {
    const int t = layout.find(name);
    if (t < 0)
      return make_error(errc::bad_configuration,
                        "--compress-skip: the model has no tensor '" + name + "'");
    full_precision[t] = true;
  }
  return plan_gradient_buckets(layout, job.bucket_bytes, full_precision);
}

std::vector<flat_range> bucket_ranges(const std::vector<gradient_bucket>& buckets) {
  std::vector<flat_range> out;
  for (const auto& b : buckets) out.push_back(flat_range{b.begin, b.end - b.begin});
  return out;
}

piece_cut cut_of(const group_start& job) {
  return piece_cut{job.generation, job.size, job.rank, job.shard_backups};
}

namespace {

// A store saved under --zero-stage 0 (its whole moments) resumed under stage 1 or 2: this
// member's pieces of the cut of `job` cut from it, and the store kept with the parameters only.
caf::error cut_whole_moments(dp_trainer_state& st, const dp_trainer_config& config,
                             const group_start& job) {
  auto& x = *st.shard->pieces;
  const auto whole = st.optimizer->adam_state(0);
  x.cut = cut_of(job);
  x.held = cut_held(x.buckets, x.cut, x.optimizer);
  const auto& own = x.held.front();
  if (own.m.empty() != whole.m.empty() || own.v.empty() != whole.v.empty())
    return make_error(errc::shape_mismatch,
                      "the checkpoint holds the state of another optimizer (saved with another "
                      "--optimizer)");
  if (!own.m.empty()) copy_overlaps(0, whole.m, x.held, false);
  if (!own.v.empty()) copy_overlaps(0, whole.v, x.held, true);
  x.version = st.optimizer->stats().version;
  x.at_step = st.restored_step;
  x.last_applied = true;
  keep_parameters_only(st, config, job);
  return {};
}

// The pieces restored from a checkpoint (the cut the coordinator named: this generation's, or
// an earlier one's if that one failed to form), at the step it was saved after.
caf::error adopt_restored_pieces(dp_trainer_state& st, const group_start& job) {
  auto restored = std::move(*st.pieces_restored);
  st.pieces_restored.reset();
  if (restored.cut.size != job.size && restored.cut.generation == job.generation)
    return make_error(errc::corrupt_data, "the restored pieces are of another cut");
  auto& x = *st.shard->pieces;
  x.cut = restored.cut;
  x.held = std::move(restored.held);
  x.version = restored.version;
  x.at_step = st.restored_step;
  x.last_applied = true;
  x.summed_step = 0;
  x.pending.clear();
  x.last_buffers.clear();
  return {};
}

}  // namespace

caf::error go_back(dp_trainer_state& st, const dp_trainer_config& config) {
  if (st.resume_failed) return std::exchange(st.resume_failed, caf::error{});
  if (st.resuming || st.restoring_pieces || !st.resumed || !st.pieces_restored)
    return make_error(errc::corrupt_data, "parts of the checkpoint's state are missing");
  if (auto err = take_resumed(st)) return err;
  if (auto err = adopt_restored_pieces(st, *st.job)) return err;
  st.shard->computed_step = 0;
  st.step = st.restored_step;
  st.restored_step = 0;
  config.log.warn("going back to the checkpoint after step {}", st.step);
  return {};
}

caf::error make_shard(dp_trainer_state& st, const dp_trainer_config& config,
                      const group_start& job) {
  auto x = std::make_shared<piece_exchange>();
  x->buckets = bucket_ranges(st.buckets);
  x->model_buffers = st.model_buffers;
  x->optimizer = job.optimizer;
  st.shard.emplace();
  st.shard->pieces = std::move(x);
  if (st.pieces_restored) return adopt_restored_pieces(st, job);  // (a checkpoint's pieces)
  if (st.restored_step > 0)  // a checkpoint's whole state (SGD's has no moments, only a step)
    return cut_whole_moments(st, config, job);
  return {};
}

void plan_sharded_checkpoint(dp_trainer_state& st) {
  if (st.job->rank == 0) st.checkpoint_parts = st.optimizer->save_plan();
  const auto& x = st.shard->pieces;
  st.checkpoint_pieces =
      piece_save_plan(std::shared_ptr<const held_pieces>(x, &x->held.front()), x->version);
}

bool shard_sum_usable(dp_trainer_state& st) {
  const auto& own = st.shard->pieces->held.front();
  const auto sum_of = sums_of(st);
  for (const auto& p : own.pieces)
    if (kernels::first_beyond(sum_of(own, p), max_abs_gradient)) return false;
  return true;
}

void step_shard_bucket(dp_trainer_state& st, size_t bucket) {
  auto& x = *st.shard->pieces;
  x.params = st.params;
  step_held_bucket(x, x.version + 1, bucket, sums_of(st));
}

void took_step(dp_trainer_state& st, bool applied) {
  auto& x = *st.shard->pieces;
  x.at_step = st.step + 1;
  x.last_applied = applied;
  x.summed_step = 0;
  x.pending.clear();
  x.last_buffers.clear();
  if (!applied) return;
  const auto buffers = summed_model_buffers(st);
  x.last_buffers.assign(buffers.begin(), buffers.end());
}

void keep_pending_sums(dp_trainer_state& st) {
  auto& x = *st.shard->pieces;
  if (x.summed_step != x.at_step + 1) {
    x.summed_step = 0;
    if (st.shard->streamed) x.pending.clear();  // (sums of an unfinished step)
    return;
  }
  // Kept already (st.values may be a new generation's now), or (--zero-stage 2) summed there.
  if (!x.pending.empty()) return;
  const auto grad = gradient(st);
  for (const auto& h : x.held)
    for (const auto& p : h.pieces)
      x.pending.insert(x.pending.end(), grad.begin() + p.offset, grad.begin() + p.offset + p.count);
}

}  // namespace troupe::dp_parts
