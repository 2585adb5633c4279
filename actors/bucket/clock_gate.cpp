#include "actors/bucket/clock_gate.hpp"

#include <algorithm>

namespace troupe {

std::optional<uint64_t> clock_gate::slowest(const vector_clock& applied) const {
  std::optional<uint64_t> low;
  for (uint32_t w = 0; w < retired_.size(); ++w)
    if (!retired_[w]) low = std::min(low.value_or(UINT64_MAX), clock_of(w, applied));
  return low;
}

bool clock_gate::allows(uint64_t clock, const vector_clock& applied) const {
  if (config_.type == consistency_config::mode::async) return true;
  const auto low = slowest(applied);
  const uint64_t bound = config_.type == consistency_config::mode::bsp ? 0 : config_.bound;
  return !low || clock <= *low + bound;
}

uint64_t clock_gate::gap(uint64_t clock, const vector_clock& applied) const {
  const auto low = slowest(applied);
  return low && clock > *low ? clock - *low : 0;
}

void clock_gate::retire(uint32_t worker) {
  if (worker < retired_.size()) retired_[worker] = true;
}

uint32_t clock_gate::live() const {
  return static_cast<uint32_t>(std::count(retired_.begin(), retired_.end(), false));
}

}  // namespace troupe
