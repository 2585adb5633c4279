// Test helper for the codec and fused-kernel tests (codec_test.cpp, codec_in_place_test.cpp,
// kernels_fused_test.cpp): n floats drawn uniformly from [-scale, scale] by a seeded mt19937,
// the same on every run.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace troupe::testing {

inline std::vector<float> random_values(size_t n, uint32_t seed, float scale = 10.0f) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> dist{-scale, scale};
  std::vector<float> out(n);
  for (auto& x : out) x = dist(rng);
  return out;
}

}  // namespace troupe::testing
