// The dp_trainer's sharded optimizer state (--zero-stage 1, ZeRO stage 1): each member steps
// only its pieces of every gradient bucket (sharded_state), from their summed gradient, which a
// reduce-scatter brought it; the parameters, whole on every member, are all-gathered after.
// A member holds the parameters (4 bytes a parameter), one gradient (4) and 1 / n of the
// values, moments and summed gradient (16 / n with Adam), against 16 for a replica.
#include <algorithm>
#include <cmath>

#include "actors/dp/trainer/dp_trainer_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_parts {

namespace {

// The shard's one slice (never a tensor's name).
const std::string shard_slice = "(shard)";

// Piece `rank` of `size` of each bucket: compressed_chunk values, the last shorter (or empty).
std::vector<shard_piece> cut_pieces(const std::vector<gradient_bucket>& buckets, uint32_t size,
                                    uint32_t rank, uint64_t& total) {
  std::vector<shard_piece> out;
  total = 0;
  for (const auto& b : buckets) {
    const uint64_t n = b.end - b.begin;
    const uint64_t chunk = compressed_chunk(n, size);
    const uint64_t first = std::min<uint64_t>(n, uint64_t{rank} * chunk);
    const uint64_t count = std::min<uint64_t>(chunk, n - first);
    out.push_back(shard_piece{b.begin + first, count, total});
    total += count;
  }
  return out;
}

// The parameters' values of this member's pieces into the shard's store, or back.
void copy_pieces(const sharded_state& shard, std::span<const float> from_params,
                 std::span<float> shard_values) {
  for (const auto& p : shard.pieces)
    std::copy_n(from_params.begin() + p.offset, p.count, shard_values.begin() + p.at);
}
void copy_pieces_back(const sharded_state& shard, std::span<const float> shard_values,
                      std::span<float> to_params) {
  for (const auto& p : shard.pieces)
    std::copy_n(shard_values.begin() + p.at, p.count, to_params.begin() + p.offset);
}

}  // namespace

optimizer_config parameters_only(optimizer_config o) {
  o.type = optimizer_config::kind::sgd;  // no state: the store holds the values alone
  return o;
}

caf::error make_shard(dp_trainer_state& st, const group_start& job) {
  sharded_state shard;
  shard.pieces = cut_pieces(st.buckets, job.size, job.rank, shard.total);
  if (shard.total > std::numeric_limits<uint32_t>::max())
    return make_error(errc::bad_configuration, "a member's pieces of over 4 G parameters");
  bucket_spec spec{0, 1, job.optimizer, {}};
  spec.values_follow = true;  // allocated by the store, filled from the parameters below
  spec.tensors.push_back(dense_tensor{shard_slice, {static_cast<uint32_t>(shard.total)}, 0, {}});
  shard.store.emplace(std::move(spec));
  copy_pieces(shard, st.params, shard.store->set_values(0));
  shard.grad = std::make_shared<std::vector<float>>(shard.total, 0.0f);
  st.shard = std::move(shard);
  return {};
}

void refresh_shard_values(dp_trainer_state& st) {
  if (st.shard) copy_pieces(*st.shard, st.params, st.shard->store->set_values(0));
}

std::span<float> summed_piece(dp_trainer_state& st, size_t bucket) {
  const auto& p = st.shard->pieces[bucket];
  return std::span<float>(*st.shard->grad).subspan(p.at, p.count);
}

bool shard_sum_usable(const dp_trainer_state& st) {
  return std::all_of(st.shard->grad->begin(), st.shard->grad->end(),
                     [](float g) { return std::isfinite(g) && std::fabs(g) <= max_abs_gradient; });
}

caf::error step_shard(dp_trainer_state& st) {
  auto& shard = *st.shard;
  push_request push{0, 0, st.step, vector_clock{}};
  push.dense.push_back(dense_tensor{shard_slice, {static_cast<uint32_t>(shard.total)}, 0, {}});
  auto applied = shard.store->apply(std::move(push), {std::span<const float>(*shard.grad)});
  if (!applied) return std::move(applied.error());
  copy_pieces_back(shard, shard.store->set_values(0), st.params);
  return {};
}

}  // namespace troupe::dp_parts
