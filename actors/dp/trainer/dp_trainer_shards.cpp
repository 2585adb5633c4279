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

void make_shard(dp_trainer_state& st, const group_start& job) {
  auto x = std::make_shared<piece_exchange>();
  for (const auto& b : st.buckets) x->buckets.push_back(flat_range{b.begin, b.end - b.begin});
  x->model_buffers = st.model_buffers;
  x->optimizer = job.optimizer;
  st.shard.emplace();
  st.shard->pieces = std::move(x);
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
