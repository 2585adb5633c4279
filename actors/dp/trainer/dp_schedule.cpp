#include "actors/dp/trainer/dp_schedule.hpp"

#include <algorithm>
#include <cstring>

namespace troupe {

uint64_t dp_steps_per_epoch(uint64_t examples, uint32_t global_batch) {
  return global_batch ? (examples + global_batch - 1) / global_batch : 0;
}

example_range dp_share(uint64_t examples, uint32_t global_batch, uint64_t step, uint32_t members,
                       uint32_t rank) {
  const uint64_t begin = step * global_batch;
  if (members == 0 || rank >= members || begin >= examples) return {};
  const uint64_t length = std::min<uint64_t>(global_batch, examples - begin);
  const uint64_t from = begin + length * rank / members;
  const uint64_t to = begin + length * (rank + 1) / members;
  return {from, static_cast<uint32_t>(to - from)};
}

example_range dp_weighted_share(uint64_t examples, uint32_t global_batch, uint64_t step,
                                const std::vector<double>& weights, uint32_t rank) {
  const uint64_t begin = step * global_batch;
  if (rank >= weights.size() || begin >= examples) return {};
  const uint64_t length = std::min<uint64_t>(global_batch, examples - begin);
  double total = 0, before = 0;
  for (size_t r = 0; r < weights.size(); ++r) {
    total += weights[r];
    if (r < rank) before += weights[r];
  }
  // Boundary k is after the first length * (w_0 + .. + w_{k-1}) / total examples; the last
  // one is the step's end whatever the rounding.
  auto boundary = [&](uint32_t k, double cumulative) -> uint64_t {
    if (k == weights.size() || !(total > 0)) return k == weights.size() ? length : 0;
    return std::min<uint64_t>(length, static_cast<uint64_t>(double(length) * cumulative / total));
  };
  const uint64_t from = boundary(rank, before);
  const uint64_t to = boundary(rank + 1, before + weights[rank]);
  return {begin + from, static_cast<uint32_t>(to > from ? to - from : 0)};
}

std::vector<uint32_t> micro_batches(uint32_t count, uint32_t parts) {
  std::vector<uint32_t> out;
  parts = std::max<uint32_t>(parts, 1);
  for (uint32_t k = 0; k < parts; ++k) {
    const uint32_t size = count / parts + (k < count % parts ? 1 : 0);
    if (size) out.push_back(size);
  }
  return out;
}

std::vector<gradient_bucket> plan_gradient_buckets(const flat_layout& layout, uint64_t cap_bytes,
                                                   const std::vector<bool>& full_precision) {
  constexpr uint64_t first_cap_bytes = uint64_t{1} << 20;
  const uint64_t cap = std::max<uint64_t>(1, cap_bytes / sizeof(float));
  const uint64_t first_cap =
      std::max<uint64_t>(1, std::min(first_cap_bytes, cap_bytes) / sizeof(float));
  std::vector<gradient_bucket> out;
  gradient_bucket open{layout.total, layout.total, {}};
  auto close = [&] {
    if (open.begin < open.end) out.push_back(open);
    open = gradient_bucket{open.begin, open.begin, {}, open.full_precision};
  };
  for (size_t t = layout.specs.size(); t-- > 0;) {
    const uint64_t t_begin = layout.offsets[t];
    const bool keep = t < full_precision.size() && full_precision[t];
    if (open.begin < open.end && open.full_precision != keep) close();
    open.full_precision = keep;
    uint64_t left = open.begin - t_begin;  // the tensor's values not yet in a bucket
    while (left > 0) {
      const uint64_t limit = out.empty() ? first_cap : cap;
      const uint64_t room = limit - (open.end - open.begin);
      if (left > room && open.begin < open.end) {  // keep whole tensors together where possible
        close();
        continue;
      }
      const uint64_t take = std::min(left, room);  // a tensor larger than a bucket is split
      open.begin -= take;
      left -= take;
      if (open.tensors.empty() || open.tensors.back() != t) open.tensors.push_back(t);
      if (open.end - open.begin == limit) close();
    }
  }
  close();
  return out;
}

uint64_t parameter_checksum(std::span<const float> values) {
  uint64_t hash = 14695981039346656037ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (size_t i = 0; i < values.size_bytes(); ++i) {
    hash ^= bytes[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace troupe
