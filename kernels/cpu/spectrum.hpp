// Spectrum estimates and step selection for the iterative inverse-root solvers
// (kernels/cpu/inverse_root and its CUDA twin). The solvers drive a matrix M, whose eigenvalues
// lie in a known interval [lo, hi], towards the identity with steps M <- T(M)^q M, where
// T(m) = gain (1 - m / pole). Classic Newton fixes pole = (q + 1) hi; choosing the pole for the
// interval at hand (the least ratio max/min of m T(m)^q over [lo, hi], as "Polar Express" does
// for the polar decomposition) lifts the smallest eigenvalues about 10x per step instead of
// 2.4x, so that condition 1e6 needs 10 coupled-Newton steps instead of 19. Plain functions of
// their arguments; any thread may call.
#pragma once

#include <cstddef>
#include <span>

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

// One step T(m) = gain (1 - m / pole) for eigenvalues in [lo, hi] (0 < lo <= hi) and the
// power q of the map m -> m T(m)^q: the pole in [max(1.25 hi, (q + 1) lo), (q + 1) hi] (T
// stays positive a quarter beyond hi, and the map rises on [0, lo], so eigenvalues below lo
// stay below its image) with the least spread afterwards, and the gain that maps the largest
// image to 1. next_lo is the new interval's lower end (its upper end is 1).
struct polynomial_step {
  double pole = 0;
  double gain = 0;
  double next_lo = 0;
};
polynomial_step choose_step(double lo, double hi, int q);

}  // namespace troupe::kernels
