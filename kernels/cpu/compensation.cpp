#include "kernels/cpu/compensation.hpp"

#include <cmath>

namespace troupe::kernels {

void compensate_linear(std::span<float> grad, std::span<const float> theta_now,
                       std::span<const float> theta_read, float lambda) {
  for (size_t i = 0; i < grad.size(); ++i) grad[i] += lambda * (theta_now[i] - theta_read[i]);
}

void compensate_dcasgd(std::span<float> grad, std::span<const float> theta_now,
                       std::span<const float> theta_read, float lambda) {
  for (size_t i = 0; i < grad.size(); ++i) {
    const float g = grad[i];
    grad[i] = g + lambda * g * g * (theta_now[i] - theta_read[i]);
  }
}

void compensate_dcasgd_adaptive(std::span<float> grad, std::span<const float> theta_now,
                                std::span<const float> theta_read, float lambda0,
                                std::span<float> mean_square, float decay, float epsilon) {
  for (size_t i = 0; i < grad.size(); ++i) {
    const float g = grad[i];
    const float ms = decay * mean_square[i] + (1.0f - decay) * g * g;
    mean_square[i] = ms;
    const float lambda = lambda0 / std::sqrt(ms + epsilon);
    grad[i] = g + lambda * g * g * (theta_now[i] - theta_read[i]);
  }
}

}  // namespace troupe::kernels
