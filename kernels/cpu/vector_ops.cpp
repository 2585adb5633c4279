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

TROUPE_CPU_CLONES double sum_of_squares(std::span<const float> values) {
  constexpr size_t lanes = 8;
  double sums[lanes] = {};
  const size_t whole = values.size() / lanes * lanes;
  for (size_t i = 0; i < whole; i += lanes)
    for (size_t k = 0; k < lanes; ++k) sums[k] += double(values[i + k]) * double(values[i + k]);
  double total = 0;
  for (size_t i = whole; i < values.size(); ++i) total += double(values[i]) * double(values[i]);
  for (double s : sums) total += s;
  return total;
}

}  // namespace troupe::kernels
