#include "kernels/cpu/vector_ops.hpp"

#include <cmath>

namespace troupe::kernels {

namespace {

TROUPE_CPU_CLONES bool all_within(std::span<const float> values, float limit) {
  const float* __restrict p = values.data();
  int ok = 1;  // an int, not a bool: the loop then vectorises
  for (size_t i = 0; i < values.size(); ++i) ok &= std::fabs(p[i]) <= limit;
  return ok;
}

}  // namespace

TROUPE_CPU_CLONES bool scale_within(std::span<float> values, float factor, float limit) {
  float* __restrict p = values.data();
  int ok = 1;
  for (size_t i = 0; i < values.size(); ++i) {
    const float x = p[i] * factor;
    p[i] = x;
    ok &= std::fabs(x) <= limit;
  }
  return ok;
}

std::optional<size_t> first_beyond(std::span<const float> values, float limit) {
  if (all_within(values, limit)) return std::nullopt;
  for (size_t i = 0; i < values.size(); ++i)
    if (!(std::fabs(values[i]) <= limit)) return i;
  return std::nullopt;
}

namespace {

// Lane k sums the squares of values k, k + 32, k + 64, ...: four AVX-512 registers of
// doubles, so that consecutive adds do not wait on each other (one register of running sums
// held the pass to the add's latency, below memory speed), in the same order on every clone.
constexpr size_t square_lanes = 32;

// Adds the squares of the whole multiple of square_lanes at the front of `values` into their
// lanes; whether each of those values is within [-limit, limit].
TROUPE_CPU_CLONES bool add_squares(std::span<const float> values, float limit,
                                   double* __restrict sums) {
  const float* __restrict p = values.data();
  const size_t whole = values.size() / square_lanes * square_lanes;
  double s[square_lanes] = {};
  int ok = 1;  // an int, not a bool: the loop then vectorises
  for (size_t i = 0; i < whole; i += square_lanes)
    for (size_t k = 0; k < square_lanes; ++k) {
      const float x = p[i + k];
      ok &= std::fabs(x) <= limit;
      s[k] += double(x) * double(x);
    }
  for (size_t k = 0; k < square_lanes; ++k) sums[k] = s[k];
  return ok;
}

// The tail after the whole lanes first, then the lanes in order.
double total_squares(std::span<const float> values, const double* sums) {
  double total = 0;
  for (size_t i = values.size() / square_lanes * square_lanes; i < values.size(); ++i)
    total += double(values[i]) * double(values[i]);
  for (size_t k = 0; k < square_lanes; ++k) total += sums[k];
  return total;
}

}  // namespace

double sum_of_squares(std::span<const float> values) {
  double sums[square_lanes];
  add_squares(values, std::numeric_limits<float>::infinity(), sums);
  return total_squares(values, sums);
}

gradient_check check_gradient(std::span<const float> values, float limit) {
  double sums[square_lanes];
  bool ok = add_squares(values, limit, sums);
  for (size_t i = values.size() / square_lanes * square_lanes; ok && i < values.size(); ++i)
    ok = std::fabs(values[i]) <= limit;
  if (!ok) return gradient_check{first_beyond(values, limit), 0.0};
  return gradient_check{std::nullopt, total_squares(values, sums)};
}

}  // namespace troupe::kernels
