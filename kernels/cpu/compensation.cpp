#include "kernels/cpu/compensation.hpp"

#include <cmath>

#include "kernels/cpu/vector_ops.hpp"

namespace troupe::kernels {

TROUPE_CPU_CLONES void compensate_linear(std::span<float> grad, std::span<const float> theta_now,
                                         std::span<const float> theta_read, float lambda) {
  float* __restrict g = grad.data();
  const float* __restrict now = theta_now.data();
  const float* __restrict then = theta_read.data();
  for (size_t i = 0; i < grad.size(); ++i) g[i] += lambda * (now[i] - then[i]);
}

TROUPE_CPU_CLONES void compensate_dcasgd(std::span<float> grad, std::span<const float> theta_now,
                                         std::span<const float> theta_read, float lambda) {
  float* __restrict gp = grad.data();
  const float* __restrict now = theta_now.data();
  const float* __restrict then = theta_read.data();
  for (size_t i = 0; i < grad.size(); ++i) {
    const float g = gp[i];
    gp[i] = g + lambda * g * g * (now[i] - then[i]);
  }
}

TROUPE_CPU_CLONES void compensate_dcasgd_adaptive(std::span<float> grad,
                                                  std::span<const float> theta_now,
                                                  std::span<const float> theta_read, float lambda0,
                                                  std::span<float> mean_square, float decay,
                                                  float epsilon) {
  float* __restrict gp = grad.data();
  float* __restrict msp = mean_square.data();
  const float* __restrict now = theta_now.data();
  const float* __restrict then = theta_read.data();
  for (size_t i = 0; i < grad.size(); ++i) {
    const float g = gp[i];
    const float ms = decay * msp[i] + (1.0f - decay) * g * g;
    msp[i] = ms;
    const float lambda = lambda0 / std::sqrt(ms + epsilon);
    gp[i] = g + lambda * g * g * (now[i] - then[i]);
  }
}

}  // namespace troupe::kernels
