// 64-bit numbers carried in two floats' bits through a collective that moves values without
// arithmetic (all_gather, broadcast): the agreements' counts, steps and sizes. For the
// allreduce_group's agreements only.
#pragma once

#include <cstdint>
#include <cstring>

namespace troupe {

inline void put_bits(uint64_t x, float* out) {
  std::memcpy(out, &x, sizeof x);
}
inline uint64_t get_bits(const float* in) {
  uint64_t x = 0;
  std::memcpy(&x, in, sizeof x);
  return x;
}

}  // namespace troupe
