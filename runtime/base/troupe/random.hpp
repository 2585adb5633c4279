// Portable, deterministic randomness for apps and the runtime: the same numbers from the same
// seed on every platform and standard library (std:: distributions and std::shuffle differ
// between them). Header-only pure functions.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace troupe {

// SplitMix64's finaliser: a well-mixed 64-bit value from any counter.
inline uint64_t splitmix64_finalize(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The golden-ratio increment SplitMix64 steps its state by.
constexpr uint64_t splitmix64_gamma = 0x9e3779b97f4a7c15ull;

// SplitMix64 (Steele, Lea, Flood 2014): a strong 64-bit mix of x.
inline uint64_t splitmix64(uint64_t x) {
  return splitmix64_finalize(x + splitmix64_gamma);
}

// A float in [0, 1) from the top 24 bits of x.
inline float unit_float(uint64_t x) {
  return static_cast<float>(x >> 40) * 0x1p-24f;
}

// The seed of epoch `epoch` of a job seeded with `seed`.
inline uint64_t epoch_seed(uint64_t seed, uint32_t epoch) {
  return splitmix64(splitmix64(seed) ^ epoch);
}

// Fisher-Yates with std::mt19937_64 raw outputs; the modulo bias is below 2^-32 for any
// vector under 2^32 entries.
inline void shuffle(std::vector<uint32_t>& v, uint64_t seed) {
  std::mt19937_64 gen(seed);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[gen() % i]);
}

}  // namespace troupe
