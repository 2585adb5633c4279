// The dp_trainer's sharded optimizer state (--zero-stage 1, ZeRO stage 1): each member steps
// only its pieces of every gradient bucket (sharded_state), in place in the parameters, from
// their sum, which the reduce-scatter left in place in the step's gradient; the parameters,
// whole on every member, are all-gathered after. A member holds the parameters (4 bytes a
// parameter), its gradient (4) and its pieces' moments (8 / n with Adam), against 16 for a
// replica.
#include <algorithm>
#include <cmath>

#include "actors/bucket/app_rule_step.hpp"
#include "actors/bucket/elementwise_step.hpp"
#include "actors/dp/trainer/dp_trainer_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_parts {

namespace {

// The summed gradient of this member's piece `p`: in place in the step's gradient.
std::span<const float> summed(const dp_trainer_state& st, const shard_piece& p) {
  return std::span<const float>(*st.values).subspan(st.meta_len + p.offset, p.count);
}

}  // namespace

optimizer_config parameters_only(optimizer_config o) {
  o.type = optimizer_config::kind::sgd;  // no state: the store holds the values alone
  return o;
}

caf::error make_shard(dp_trainer_state& st, const group_start& job) {
  sharded_state shard;
  for (const auto& b : st.buckets) {
    const auto p = sharded_piece(b.end - b.begin, job.size, job.rank);
    shard.pieces.push_back(shard_piece{b.begin + p.begin, p.count, shard.total});
    shard.total += p.count;
  }
  const unsigned moments = moments_of(job.optimizer, std::nullopt);
  shard.m.assign(moments >= 1 ? shard.total : 0, 0.0f);
  shard.v.assign(moments >= 2 ? shard.total : 0, 0.0f);
  st.shard = std::move(shard);
  return {};
}

bool shard_sum_usable(const dp_trainer_state& st) {
  for (const auto& p : st.shard->pieces)
    for (float g : summed(st, p))
      if (!std::isfinite(g) || std::fabs(g) > max_abs_gradient) return false;
  return true;
}

caf::error step_shard(dp_trainer_state& st) {
  auto& shard = *st.shard;
  const auto& o = st.job->optimizer;
  const uint64_t t = shard.version + 1;
  auto moment = [](std::vector<float>& all, const shard_piece& p) {
    return all.empty() ? std::span<float>{} : std::span<float>(all).subspan(p.at, p.count);
  };
  for (const auto& p : shard.pieces)
    if (!step_elementwise(o, o.lr, t, st.params.subspan(p.offset, p.count), moment(shard.m, p),
                          moment(shard.v, p), summed(st, p)))
      return make_error(errc::bad_configuration,
                        "sharded state takes element-wise optimizers only (sgd, momentum, "
                        "adam, adamw)");
  shard.version = t;
  return {};
}

}  // namespace troupe::dp_parts
