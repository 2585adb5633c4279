#include "kernels/cpu/optimizers.hpp"

#include <cmath>

namespace troupe::kernels {

void adam_step(std::span<float> theta, std::span<float> m, std::span<float> v,
               std::span<const float> grad, const adam_hyper& h) {
  const double t = static_cast<double>(h.step);
  const float correction1 = static_cast<float>(1.0 - std::pow(double{h.beta1}, t));
  const float correction2 = static_cast<float>(1.0 - std::pow(double{h.beta2}, t));
  const float step_size = h.lr / correction1;
  const float inv_sqrt_c2 = 1.0f / std::sqrt(correction2);
  const size_t n = theta.size();
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    const float vi = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * inv_sqrt_c2 + h.epsilon;
    theta[i] -= step_size * mi / denom + h.lr * h.weight_decay * theta[i];
  }
}

void sgd_momentum_step(std::span<float> theta, std::span<float> velocity,
                       std::span<const float> grad, float lr, float momentum, float weight_decay) {
  const size_t n = theta.size();
  if (momentum == 0.0f) {
    for (size_t i = 0; i < n; ++i) theta[i] -= lr * (grad[i] + weight_decay * theta[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float u = momentum * velocity[i] + grad[i] + weight_decay * theta[i];
    velocity[i] = u;
    theta[i] -= lr * u;
  }
}

}  // namespace troupe::kernels
