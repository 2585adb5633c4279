// Step choice for the Newton-type inverse-root solvers (kernels/cpu/inverse_root and the CUDA
// twin, kernels/cuda/dash.cu; C++17 so that nvcc may include it). The solvers drive a matrix
// M, whose eigenvalues lie in an interval [lo, hi], towards the identity with steps
// M <- T(M)^q M, where T(m) = gain (1 - m / pole). Classic Newton fixes pole = (q + 1) hi;
// choosing the pole for the interval at hand (the least ratio max/min of m T(m)^q over
// [lo, hi], as "Polar Express" does for the polar decomposition) lifts the smallest eigenvalues
// about 10x per step instead of 2.4x, so that condition 1e6 needs 10 coupled-Newton steps
// instead of 19. Plain functions of their arguments; any thread may call.
#pragma once

#include <vector>

namespace troupe::kernels {

// One step T(m) = gain (1 - m / pole) for eigenvalues in [lo, hi] (0 < lo <= hi) and the
// power q of the map m -> m T(m)^q: the pole in [max(1.25 hi, (q + 1) lo), (q + 1) hi] (T
// stays positive a quarter beyond hi, and the map rises on [0, lo], so eigenvalues below lo
// rise and never pass 1) with the least spread afterwards, and the gain that maps the largest
// image to 1. next_lo is the new interval's lower end (its upper end is 1).
struct polynomial_step {
  double pole = 0;
  double gain = 0;
  double next_lo = 0;
};
polynomial_step choose_step(double lo, double hi, int q);

// The steps for an interval [lo, 1] known for sure (no estimate): chosen steps until the
// interval's lower end reaches 0.999, then `classic` classic ones; at most max_steps in all.
// Every block whose spectrum lies in the interval may take the same steps (the GPU's batches).
std::vector<polynomial_step> newton_schedule(double lo, int q, int classic, int max_steps);

}  // namespace troupe::kernels
