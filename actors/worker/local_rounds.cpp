#include "actors/worker/local_rounds.hpp"

#include <algorithm>

#include "actors/bucket/app_rule_step.hpp"
#include "actors/bucket/elementwise_step.hpp"
#include "kernels/cpu/half.hpp"
#include "kernels/cpu/int8_blocks.hpp"

namespace troupe {

namespace {

// Calls f(offset, count) for each slice of the buckets [first, end) of `plan`.
template <class F>
void for_each_range(const flat_layout& layout, const placement& plan, uint32_t first, uint32_t end,
                    F&& f) {
  for (uint32_t b = first; b < end; ++b)
    for (const auto& s : plan.buckets[b].slices)
      if (const auto range = locate(layout, s))  // validated when the job started
        f(range->offset, range->count);
}

}  // namespace

round_state::round_state(local_rounds c, uint64_t values, uint32_t buckets)
    : config(std::move(c)),
      start(values, 0.0f),
      fragments(fragment_buckets(buckets, config.fragments)) {
  const unsigned moments = moments_of(config.inner, std::nullopt);
  if (moments >= 1) m.assign(values, 0.0f);
  if (moments >= 2) v.assign(values, 0.0f);
  if (config.fragments > 1) at_sync.assign(values, 0.0f);
  if (config.storage == comm_dtype::int8) residual.assign(values, 0.0f);
}

std::vector<std::pair<uint32_t, uint32_t>> fragment_buckets(uint32_t buckets, uint32_t fragments) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  const uint32_t f = std::clamp<uint32_t>(fragments, 1, std::max<uint32_t>(buckets, 1));
  for (uint32_t k = 0; k < f; ++k)
    out.emplace_back(uint64_t{k} * buckets / f, uint64_t{k + 1} * buckets / f);
  return out;
}

uint32_t sync_step(uint32_t k, uint32_t fragments, uint32_t count) {
  const uint64_t f = std::max<uint32_t>(fragments, 1);
  return static_cast<uint32_t>(std::max<uint64_t>(1, ((k + 1) * uint64_t{count} + f - 1) / f));
}

void inner_step(round_state& r, std::span<float> params, std::span<const float> grad) {
  step_elementwise(r.config.inner, r.config.inner.lr, ++r.inner_steps, params, r.m, r.v, grad);
}

uint64_t take_pseudo_gradient(round_state& r, const flat_layout& layout, const placement& plan,
                              uint32_t k, std::span<const float> params, std::span<float> grad) {
  const auto [first, end] = r.fragments[k];
  uint64_t bytes = 0;
  for_each_range(layout, plan, first, end, [&](uint64_t at, uint64_t n) {
    for (uint64_t i = at; i < at + n; ++i) grad[i] = r.start[i] - params[i];
    if (!r.at_sync.empty()) std::copy_n(params.begin() + at, n, r.at_sync.begin() + at);
    const auto sent = grad.subspan(at, n);
    if (!r.residual.empty())
      kernels::int8_round_trip(sent, std::span<float>(r.residual).subspan(at, n));
    else if (r.config.storage == comm_dtype::bf16)
      for (float& x : sent) x = kernels::bf16_to_float(kernels::float_to_bf16(x));
    else if (r.config.storage == comm_dtype::fp16)
      for (float& x : sent) x = kernels::half_to_float(kernels::float_to_half(x));
    bytes += stored_bytes(n, push_storage(r));
  });
  return bytes;
}

void merge_pulled(round_state& r, const flat_layout& layout, const placement& plan,
                  std::span<float> params) {
  const auto buckets = static_cast<uint32_t>(plan.buckets.size());
  for_each_range(layout, plan, 0, buckets, [&](uint64_t at, uint64_t n) {
    for (uint64_t i = at; i < at + n; ++i)
      params[i] = r.at_sync.empty() ? r.start[i] : r.start[i] + (params[i] - r.at_sync[i]);
  });
}

dtype push_storage(const round_state& r) {
  switch (r.config.storage) {
    case comm_dtype::fp32:
      return dtype::f32;
    case comm_dtype::bf16:
      return dtype::bf16;
    case comm_dtype::fp16:
      return dtype::f16;
    case comm_dtype::int8:
      return dtype::i8;
  }
  return dtype::f32;
}

}  // namespace troupe
