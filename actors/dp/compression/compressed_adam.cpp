#include "actors/dp/compression/compressed_adam.hpp"

#include <algorithm>
#include <cmath>

namespace troupe {

adam_stage stage_of(const dp_compression& c, uint64_t step, bool epoch_end) {
  switch (c.adam) {
    case compressed_adam::none:
      return adam_stage::full;
    case compressed_adam::onebit:
      return step <= c.freeze_step ? adam_stage::full : adam_stage::momentum;
    case compressed_adam::zero_one:
      if (step <= c.var_freeze_step)
        return variance_refresh(step, c.var_update_scaler) ? adam_stage::full
                                                           : adam_stage::momentum;
      return epoch_end || step % local_interval(c, step) == 0 ? adam_stage::sync
                                                              : adam_stage::local;
  }
  return adam_stage::full;
}

// Refreshes come in rounds of `scaler`; round j takes every 2^j-th step after the last
// refresh of round j - 1 (steps 1..K, then K steps that are multiples of 2, ...).
bool variance_refresh(uint64_t step, uint32_t scaler) {
  uint64_t last = 0;  // the last refresh of the rounds before
  for (uint64_t interval = 1; interval <= step; interval *= 2) {
    const uint64_t first = (last / interval + 1) * interval;
    const uint64_t end = first + (uint64_t{scaler} - 1) * interval;  // the round's last refresh
    if (step <= end) return step >= first && (step - first) % interval == 0;
    last = end;
  }
  return false;
}

uint64_t variance_refreshes(const dp_compression& c, uint64_t step) {
  const uint64_t until = c.adam == compressed_adam::onebit ? std::min(step, c.freeze_step)
                                                           : std::min(step, c.var_freeze_step);
  if (c.adam == compressed_adam::onebit) return until;
  uint64_t count = 0, last = 0;
  for (uint64_t interval = 1; last < until; interval *= 2) {
    const uint64_t first = (last / interval + 1) * interval;
    if (first > until) break;
    const uint64_t in_round =
        std::min<uint64_t>(c.var_update_scaler, (until - first) / interval + 1);
    count += in_round;
    last = first + (in_round - 1) * interval;
    if (in_round < c.var_update_scaler) break;
  }
  return count;
}

uint64_t local_interval(const dp_compression& c, uint64_t step) {
  const uint64_t since = step > c.var_freeze_step ? step - c.var_freeze_step - 1 : 0;
  const uint64_t doublings = since / std::max<uint64_t>(1, c.local_step_scaler);
  if (doublings >= 32) return c.local_step_clipper;
  return std::min<uint64_t>(c.local_step_clipper, uint64_t{1} << doublings);
}

adam_corrections corrections_of(const optimizer_config& o, uint64_t t, uint64_t k) {
  return {1.0 - std::pow(double(o.beta1), double(t)),
          k ? 1.0 - std::pow(double(o.beta2), double(k)) : 1.0};
}

void update_momentum(std::span<float> m, std::span<const float> g, float beta1) {
  for (size_t i = 0; i < m.size(); ++i) m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
}

void update_variance(std::span<float> v, std::span<const float> g, float beta2) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
}

void adam_move(std::span<float> theta, std::span<const float> m, std::span<const float> v,
               const optimizer_config& o, adam_corrections c, float bound,
               std::span<float> accumulated) {
  const float cm = static_cast<float>(1.0 / c.momentum);
  const float cv = static_cast<float>(1.0 / c.variance);
  for (size_t i = 0; i < theta.size(); ++i) {
    const float moved = o.lr * (m[i] * cm);
    float ratio = (m[i] * cm) / (std::sqrt(v[i] * cv) + o.epsilon);
    if (bound > 0) ratio = std::clamp(ratio, -bound, bound);
    theta[i] -= o.lr * ratio;
    if (!accumulated.empty()) accumulated[i] += moved;
  }
}

void adopt_mean_update(std::span<float> theta, std::span<const float> anchor, std::span<float> m,
                       std::span<const float> v, std::span<const float> mean,
                       const optimizer_config& o, adam_corrections c, double lr_sum) {
  const float cv = static_cast<float>(1.0 / c.variance);
  const float to_momentum = static_cast<float>(c.momentum / std::max(lr_sum, 1e-30));
  const float bound = static_cast<float>(max_compressed_ratio * lr_sum);
  for (size_t i = 0; i < theta.size(); ++i) {  // (a value whose variance is 0 stays put)
    const float moved = v[i] > 0 ? mean[i] : 0.0f;
    theta[i] = anchor[i] - std::clamp(moved / (std::sqrt(v[i] * cv) + o.epsilon), -bound, bound);
    m[i] = moved * to_momentum;
  }
}

}  // namespace troupe
