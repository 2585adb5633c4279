// Delay compensation of stale gradients (DC-ASGD, Zheng et al. 2017, "Asynchronous Stochastic
// Gradient Descent with Delay Compensation"). A gradient g computed at theta_read is applied
// at theta_now; a first-order Taylor correction with the Hessian approximated by g*g (or by
// the identity, the linear form) moves it towards the gradient at theta_now:
//   linear:   g <- g + lambda (theta_now - theta_read)
//   dcasgd:   g <- g + lambda g*g*(theta_now - theta_read)
//   adaptive: as dcasgd with lambda_k = lambda0 / sqrt(ms_k + eps), ms <- m ms + (1-m) g*g
// In-place on g; all spans the same length; no allocation; safe from any thread.
#pragma once

#include <span>

namespace troupe::kernels {

void compensate_linear(std::span<float> grad, std::span<const float> theta_now,
                       std::span<const float> theta_read, float lambda);

void compensate_dcasgd(std::span<float> grad, std::span<const float> theta_now,
                       std::span<const float> theta_read, float lambda);

// `mean_square` is the running mean of g*g, updated here with `decay` (m) before use.
void compensate_dcasgd_adaptive(std::span<float> grad, std::span<const float> theta_now,
                                std::span<const float> theta_read, float lambda0,
                                std::span<float> mean_square, float decay = 0.95f,
                                float epsilon = 1e-7f);

}  // namespace troupe::kernels
