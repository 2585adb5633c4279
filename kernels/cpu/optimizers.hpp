// Element-wise optimizer updates on fp32 spans: the CPU reference for kernels/cuda and the
// path parameter buckets run on machines without a GPU. Callers own the buffers; every span of
// one call has the same length. No allocation, no threads, safe from any thread.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/adam_hyper.hpp"

namespace troupe::kernels {

// Adam (Kingma & Ba 2015), with decoupled weight decay (Loshchilov & Hutter 2019) and an
// optional coupled L2 term, all in one pass over the arrays:
//   g <- g + l2 theta (read only: `grad` is not written)
//   m <- b1 m + (1-b1) g          v <- b2 v + (1-b2) g^2
//   theta <- theta - lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * theta )
void adam_step(std::span<float> theta, std::span<float> m, std::span<float> v,
               std::span<const float> grad, const adam_hyper& h);

// Adam on a gradient corrected for delay (DC-ASGD, Zheng et al. 2017) in the same pass:
//   g <- g + lambda g^2 (theta - theta_read), then adam_step's update with that g.
// Bit for bit what compensate_dcasgd (compensation.hpp) and then adam_step give, with the
// gradient, the values and the read copy each read once, all streams in flight together.
void adam_dcasgd_step(std::span<float> theta, std::span<float> m, std::span<float> v,
                      std::span<const float> grad, std::span<const float> theta_read, float lambda,
                      const adam_hyper& h);

// SGD with heavy-ball momentum: u <- mu u + g + wd theta;  theta <- theta - lr u.
// momentum = 0 is plain SGD (velocity is then unused and may be empty).
void sgd_momentum_step(std::span<float> theta, std::span<float> velocity,
                       std::span<const float> grad, float lr, float momentum, float weight_decay);

// Nesterov momentum (Sutskever et al. 2013, as torch.optim.SGD(nesterov=True)), DiLoCo's outer
// optimizer on pseudo-gradients:  u <- mu u + g;  theta <- theta - lr (g + mu u).
void nesterov_step(std::span<float> theta, std::span<float> velocity, std::span<const float> grad,
                   float lr, float momentum);

// Delayed Nesterov (Liu et al. 2024, "Asynchronous Local-SGD Training for Language Modeling",
// with c = 0): for stale pseudo-gradients arriving one at a time. Each arrival g of update
// number t (1-based) is added to `buffer` and applied at once as theta <- theta - lr g / N;
// every N-th arrival the momentum takes the buffer's mean and is applied too:
//   u <- mu u + buffer / N;  theta <- theta - lr mu u;  buffer <- 0.
// Over N arrivals that is one Nesterov step on their mean; N = 1 is nesterov_step.
void delayed_nesterov_step(std::span<float> theta, std::span<float> velocity,
                           std::span<float> buffer, std::span<const float> grad, float lr,
                           float momentum, uint32_t delay, uint64_t t);

}  // namespace troupe::kernels
