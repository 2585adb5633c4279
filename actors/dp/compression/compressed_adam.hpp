// 1-bit Adam (Tang et al. 2021, arXiv 2102.02888) and 0/1 Adam (Lu et al. 2022, arXiv
// 2202.06009) for a data-parallel group: the schedules that say what each step communicates,
// and the element-wise Adam arithmetic of their stages. Pure functions; the dp_trainer runs
// them on its replica's slices and the allreduce_group moves the bytes.
//
// 1-bit Adam: steps 1..freeze_step are plain Adam on the full-precision mean gradient; later
// steps freeze the variance and allreduce the momentum itself, one bit per value with error
// feedback on both sides (actors/dp/compression/compressed_allreduce.hpp).
// 0/1 Adam: up to var_freeze_step, the variance is refreshed from a full-precision gradient
// only at steps 1..K, then every 2nd step K more times, every 4th K more times... (K =
// var_update_scaler); the other steps allreduce the momentum in one bit, as above. After
// var_freeze_step the members take local steps and synchronise only every H steps, where H
// starts at 1 and doubles every local_step_scaler steps up to local_step_clipper (and at the
// end of every epoch): they allreduce, in one bit, the update each accumulated since the last
// synchronisation, go on from the mean, and take the momentum the mean implies.
//
// Unlike DeepSpeed, steps are bias-corrected as Troupe's Adam is: the momentum by the step
// count t, the variance by the number of refreshes k it has had, so the first compressed step
// is the continuation of the warmup's last.
#pragma once

#include <cstdint>
#include <span>

#include "messages/types.hpp"

namespace troupe {

// What step `step` (1-based) of a data-parallel job does.
enum class adam_stage : uint8_t {
  full,      // full-precision mean gradient; the variance is refreshed
  momentum,  // the momentum is allreduced in one bit; the variance is frozen
  local,     // 0/1 Adam: a local step, nothing communicated
  sync,      // 0/1 Adam: a local step, then the accumulated updates are allreduced in one bit
};

// `epoch_end`: the step is the last of an epoch (0/1 Adam synchronises there, so that every
// member evaluates and checkpoints the same model).
adam_stage stage_of(const dp_compression& c, uint64_t step, bool epoch_end);

// Whether step is a compressed one (any stage but full) for the report's by-stage figures.
inline bool compressed_stage(adam_stage s) {
  return s != adam_stage::full;
}

// 0/1 Adam: whether step `step` (<= var_freeze_step) refreshes the variance, and how many
// refreshes steps 1..step held.
bool variance_refresh(uint64_t step, uint32_t scaler);
uint64_t variance_refreshes(const dp_compression& c, uint64_t step);

// 0/1 Adam: the interval between synchronisations at step `step` (> var_freeze_step).
uint64_t local_interval(const dp_compression& c, uint64_t step);

// The bias corrections of step t after k refreshes of the variance: 1 - b1^t and 1 - b2^k.
struct adam_corrections {
  double momentum = 1;
  double variance = 1;
};
adam_corrections corrections_of(const optimizer_config& o, uint64_t t, uint64_t k);

// A compressed momentum or mean update is exact on average (error feedback), not at each step:
// a value whose variance is small can get a sign of another's scale. So in the compressed
// stages (0/1 Adam's local steps too: their momentum comes from a compressed mean) no value
// moves by more than max_compressed_ratio * lr in one step (plain Adam's
// |m / sqrt(v)| is about 1 at most); the warmup, as plain Adam, is not bounded.
constexpr float max_compressed_ratio = 2.0f;

// m <- b1 m + (1 - b1) g
void update_momentum(std::span<float> m, std::span<const float> g, float beta1);
// v <- b2 v + (1 - b2) g^2
void update_variance(std::span<float> v, std::span<const float> g, float beta2);
// theta <- theta - lr * (m / cm) / (sqrt(v / cv) + eps), the ratio bounded by `bound` when
// it is above 0; with `accumulated`, also accumulated += lr * (m / cm) (0/1 Adam's update
// since the last synchronisation).
void adam_move(std::span<float> theta, std::span<const float> m, std::span<const float> v,
               const optimizer_config& o, adam_corrections c, float bound = 0,
               std::span<float> accumulated = {});
// 0/1 Adam's synchronisation: theta <- anchor - mean / (sqrt(v / cv) + eps), bounded by
// max_compressed_ratio * lr_sum, and m <- cm * mean / lr_sum (the momentum of the mean).
void adopt_mean_update(std::span<float> theta, std::span<const float> anchor, std::span<float> m,
                       std::span<const float> v, std::span<const float> mean,
                       const optimizer_config& o, adam_corrections c, double lr_sum);

}  // namespace troupe
