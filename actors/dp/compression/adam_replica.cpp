#include "actors/dp/compression/adam_replica.hpp"

#include <algorithm>

#include "kernels/cpu/vector_ops.hpp"
#include "troupe/error.hpp"

namespace troupe {

adam_replica::adam_replica(const flat_layout& layout, const bucket_placement& plan,
                           dp_compression compression, optimizer_config o)
    : layout_(layout), compression_(std::move(compression)), optimizer_(o) {
  for (const auto& spec : layout.specs)
    for (size_t s = 0; s < plan.slices.size(); ++s)
      if (plan.slices[s].tensor == spec.name) slice_of_.push_back(s);
}

template <class Fn>
void adam_replica::for_pieces(uint64_t begin, uint64_t end, Fn fn) const {
  for (size_t t = 0; t < layout_.specs.size(); ++t) {
    const uint64_t from = std::max(begin, layout_.offsets[t]);
    const uint64_t t_end = t + 1 < layout_.specs.size() ? layout_.offsets[t + 1] : layout_.total;
    const uint64_t to = std::min(end, t_end);
    if (from < to) fn(slice_of_[t], from - layout_.offsets[t], from, to - from);
  }
}

adam_corrections adam_replica::corrections(uint64_t step) const {
  return corrections_of(optimizer_, step, variance_refreshes(compression_, step));
}

void adam_replica::restart(bucket_store& store) {
  anchor_.assign(layout_.total, 0.0f);
  for_pieces(0, layout_.total, [&](size_t s, uint64_t at, uint64_t flat, uint64_t n) {
    auto theta = store.adam_state(s).values.subspan(at, n);
    std::copy(theta.begin(), theta.end(), anchor_.begin() + flat);
  });
  accumulated_.assign(compression_.adam == compressed_adam::zero_one ? layout_.total : 0, 0.0f);
  lr_sum_ = 0;
}

void adam_replica::prepare(adam_stage stage, std::span<float> values, uint64_t begin, float weight,
                           bucket_store& store) const {
  const float wd = optimizer_.weight_decay * weight, b1 = optimizer_.beta1;
  for_pieces(begin, begin + values.size(), [&](size_t s, uint64_t at, uint64_t flat, uint64_t n) {
    auto state = store.adam_state(s);
    auto mine = values.subspan(flat - begin, n);
    for (uint64_t i = 0; i < n; ++i) {
      float g = mine[i] + wd * state.values[at + i];
      if (stage == adam_stage::momentum) g = weight * b1 * state.m[at + i] + (1.0f - b1) * g;
      mine[i] = g;
    }
  });
}

caf::error adam_replica::apply(adam_stage stage, uint64_t step, std::span<const float> summed,
                               bucket_store& store) {
  if (!kernels::all_finite(summed))
    return make_error(errc::non_finite, "the summed gradient or momentum is not finite");
  const auto c = corrections(step);
  for_pieces(0, layout_.total, [&](size_t s, uint64_t at, uint64_t flat, uint64_t n) {
    auto state = store.adam_state(s);
    auto m = state.m.subspan(at, n), v = state.v.subspan(at, n);
    auto values = summed.subspan(flat, n);
    if (stage == adam_stage::full) {
      update_momentum(m, values, optimizer_.beta1);
      update_variance(v, values, optimizer_.beta2);
    } else {  // values whose variance is 0 never had a gradient: their signs are noise
      for (uint64_t i = 0; i < n; ++i) m[i] = v[i] > 0 ? values[i] : 0.0f;
    }
    adam_move(state.values.subspan(at, n), m, v, optimizer_, c,
              stage == adam_stage::full ? 0.0f : max_compressed_ratio);
  });
  return {};
}

caf::error adam_replica::local_step(uint64_t step, std::span<const float> grad, bucket_store& store,
                                    bool in_place) {
  const auto& o = optimizer_;
  lr_sum_ += o.lr;  // counted alike on every member, whether this one steps or not
  if (!kernels::all_finite(grad))
    return make_error(errc::non_finite, "this member's gradient is not finite");
  const auto c = corrections(step);
  for_pieces(0, layout_.total, [&](size_t s, uint64_t at, uint64_t flat, uint64_t n) {
    auto state = store.adam_state(s);
    // Stepped in scratch copies unless in place (a sync step keeps the store as it is).
    std::span<float> theta = state.values.subspan(at, n), m = state.m.subspan(at, n);
    if (!in_place) {
      theta_scratch_.assign(theta.begin(), theta.end());
      m_scratch_.assign(m.begin(), m.end());
      theta = theta_scratch_;
      m = m_scratch_;
    }
    g_scratch_.assign(grad.begin() + flat, grad.begin() + flat + n);
    for (uint64_t i = 0; i < n; ++i) g_scratch_[i] += o.weight_decay * theta[i];
    update_momentum(m, g_scratch_, o.beta1);
    adam_move(theta, m, state.v.subspan(at, n), o, c, max_compressed_ratio,
              std::span<float>(accumulated_).subspan(flat, n));
  });
  return {};
}

void adam_replica::accumulated(std::span<float> out, float weight) const {
  for (size_t i = 0; i < out.size() && i < accumulated_.size(); ++i)
    out[i] = weight * accumulated_[i];
}

caf::error adam_replica::adopt(uint64_t step, std::span<const float> mean, bucket_store& store) {
  if (!kernels::all_finite(mean)) {
    // Every member goes back to the anchor with no momentum, alike.
    for_pieces(0, layout_.total, [&](size_t s, uint64_t at, uint64_t flat, uint64_t n) {
      auto state = store.adam_state(s);
      std::copy(anchor_.begin() + flat, anchor_.begin() + flat + n, state.values.begin() + at);
      std::fill(state.m.begin() + at, state.m.begin() + at + n, 0.0f);
    });
    restart(store);
    return make_error(errc::non_finite,
                      "the members' mean update is not finite: back to the last synchronisation");
  }
  const auto c = corrections(step);
  for_pieces(0, layout_.total, [&](size_t s, uint64_t at, uint64_t flat, uint64_t n) {
    auto state = store.adam_state(s);
    adopt_mean_update(state.values.subspan(at, n), std::span<const float>(anchor_).subspan(flat, n),
                      state.m.subspan(at, n), state.v.subspan(at, n), mean.subspan(flat, n),
                      optimizer_, c, lr_sum_);
  });
  restart(store);
  return {};
}

}  // namespace troupe
