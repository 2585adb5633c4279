#include "actors/dp/dp_schedule.hpp"

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

std::vector<gradient_bucket> plan_gradient_buckets(const flat_layout& layout, uint64_t cap_bytes) {
  constexpr uint64_t first_cap_bytes = uint64_t{1} << 20;
  const uint64_t cap = std::max<uint64_t>(1, cap_bytes / sizeof(float));
  const uint64_t first_cap =
      std::max<uint64_t>(1, std::min(first_cap_bytes, cap_bytes) / sizeof(float));
  std::vector<gradient_bucket> out;
  gradient_bucket open{layout.total, layout.total, {}};
  auto close = [&] {
    if (open.begin < open.end) out.push_back(open);
    open = gradient_bucket{open.begin, open.begin, {}};
  };
  for (size_t t = layout.specs.size(); t-- > 0;) {
    const uint64_t t_begin = layout.offsets[t];
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
