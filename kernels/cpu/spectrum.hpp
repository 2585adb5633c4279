// Spectrum estimates for the iterative inverse-root solvers (kernels/cpu/inverse_root): the
// largest eigenvalue by power iteration, both extremes by Lanczos; with the step choice of
// kernels/cpu/newton_steps. Plain functions of their arguments; any thread may call.
#pragma once

#include <cstddef>
#include <span>

#include "kernels/cpu/newton_steps.hpp"

namespace troupe::kernels {

// The largest eigenvalue of symmetric a (n x n, row-major) by power iteration, in double.
double largest_eigenvalue(std::span<const float> a, size_t n, int iterations = 100);

// The extreme Ritz values of symmetric a after `steps` Lanczos steps (full
// reorthogonalisation, in double): smallest >= lambda_min(a), largest <= lambda_max(a), both
// close for extremes set apart from the rest; a cheap estimate, not a bound.
struct ritz_extremes {
  double smallest = 0;
  double largest = 0;
};
ritz_extremes lanczos_extremes(std::span<const float> a, size_t n, int steps = 24);

}  // namespace troupe::kernels
