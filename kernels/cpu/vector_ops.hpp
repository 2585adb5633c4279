// Passes over a whole gradient or parameter vector that every step makes (scaling and checking
// a bucket, the bound check of a push, a gradient's norm), written so that the compiler
// vectorises them, and built for AVX-512, AVX2 and the baseline at once (TROUPE_CPU_CLONES:
// the loader picks the widest the CPU has). The results do not depend on the clone: the
// passes are element-wise (no contraction into FMA in ISO C++ mode) or sum in a fixed order.
// For the actors and the other kernels; no state.
#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <span>

// Clones of a function for AVX-512, AVX2 and the baseline x86-64, chosen at load time.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TROUPE_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TROUPE_CPU_CLONES
#endif

namespace troupe::kernels {

// values[i] *= factor for every i; whether every result is within [-limit, limit] (NaN and
// Inf are not).
bool scale_within(std::span<float> values, float factor, float limit);

// The index of the first value that is NaN, Inf or beyond [-limit, limit]; none when all are
// within (the common case: one branch-free pass).
std::optional<size_t> first_beyond(std::span<const float> values, float limit);

// Whether every value is finite (no NaN, no Inf).
inline bool all_finite(std::span<const float> values) {
  return !first_beyond(values, std::numeric_limits<float>::max());
}

// The sum of the squares in double precision, in 32 running sums, in a fixed order.
double sum_of_squares(std::span<const float> values);

// A pushed gradient's bound check and squared norm, in one pass over it (a bucket's values
// arrive cold from the network: reading them twice costs a second trip to memory).
struct gradient_check {
  std::optional<size_t> beyond;  // as first_beyond
  double squares = 0;            // as sum_of_squares; 0 when a value is beyond
};
gradient_check check_gradient(std::span<const float> values, float limit);

}  // namespace troupe::kernels
