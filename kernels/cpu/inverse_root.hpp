// Inverse p-th roots of symmetric positive definite matrices, A^{-1/p}: the preconditioner
// roots of Shampoo and DASH (L^{-1/4}, R^{-1/4}). Four solvers:
//   evd:            eigendecomposition in double precision (LAPACK dsyevd): the reference;
//   coupled_newton: the coupled Newton iteration (Guo & Higham 2006) in fp32 GEMMs, each
//                   step's polynomial chosen for where the spectrum is (kernels/cpu/spectrum);
//   newton_db:      inverse-free Denman-Beavers (Newton-Schulz) iterations: A^{-1/2}, then
//                   the square root of that, A^{-1/4} (p = 4 only); steps chosen the same way;
//   chebyshev:      coupled-Newton steps until the spectrum lies in [0.1, 1], then a
//                   Chebyshev series of x^{-1/p} on that interval, evaluated on the matrix by
//                   Clenshaw's recurrence (one GEMM per degree). A series alone would need a
//                   degree in the thousands at condition 1e6.
// Every solver first adds epsilon * lambda_max(A) to the diagonal (damping) and scales A by
// its largest eigenvalue: the larger of a power-iteration and a Lanczos estimate, plus 1%, or
// the Frobenius norm (a sure bound); the Newton solvers start from Lanczos's estimate of the
// smallest eigenvalue. Row-major n x n matrices in
// fp32; scratch is allocated per call. No threads beyond BLAS's; any thread may call.
#pragma once

#include <cstddef>
#include <span>

#include "kernels/status.hpp"
#include "troupe/values.hpp"

namespace troupe::kernels {

// The solver and scaling choices are the job's (troupe/values.hpp), named here too.
using troupe::root_scaling;
using troupe::root_solver;

struct root_options {
  root_solver solver = root_solver::coupled_newton;
  root_scaling scaling = root_scaling::power_iteration;
  float epsilon = 1e-6f;     // damping, relative to the largest eigenvalue
  int max_iterations = 100;  // per Newton stage
  float tolerance = 1e-6f;   // stop when ||M - I||_F is below this (or stops improving)
  int degree = 16;           // chebyshev: the series' degree
};

struct root_outcome {
  int iterations = 0;     // Newton steps taken, plus the series' degree for chebyshev (evd: 0)
  double residual = 0.0;  // ||M - I||_F at the end, or its bound after an X-only last step
  double gemm_flops = 0;  // matrix-multiply FLOPs spent (0 for evd, which is not GEMMs)
};

// out = (a + damping)^{-1/p}, both n x n row-major; p >= 1. errc::non_finite for a matrix
// with NaN/Inf or a solver that did not converge (residual above 1e-2; out is then not to be
// used), errc::shape_mismatch for wrong sizes, errc::bad_configuration for a solver that
// cannot do p (newton_db: p = 4 only), a chebyshev degree below 1 or chebyshev without
// damping.
result<root_outcome> inverse_root(std::span<const float> a, size_t n, int p, std::span<float> out,
                                  const root_options& options);

}  // namespace troupe::kernels
