#include "kernels/cpu/optimizers.hpp"
#include "kernels/cpu/vector_ops.hpp"

#include <cmath>

namespace troupe::kernels {

TROUPE_CPU_CLONES void adam_step(std::span<float> theta, std::span<float> m, std::span<float> v,
                                 std::span<const float> grad, const adam_hyper& h) {
  const double t = static_cast<double>(h.step);
  const float correction1 = static_cast<float>(1.0 - std::pow(double{h.beta1}, t));
  const float correction2 = static_cast<float>(1.0 - std::pow(double{h.beta2}, t));
  const float step_size = h.lr / correction1;
  const float inv_sqrt_c2 = 1.0f / std::sqrt(correction2);
  // Locals and restrict-qualified pointers: stores to m, v, theta cannot change the
  // hyper-parameters or each other, so the loop vectorises.
  const float beta1 = h.beta1, beta2 = h.beta2, epsilon = h.epsilon, l2 = h.l2;
  const float decay = h.lr * h.weight_decay;
  float* __restrict th = theta.data();
  float* __restrict mp = m.data();
  float* __restrict vp = v.data();
  const float* __restrict gp = grad.data();
  const size_t n = theta.size();
  for (size_t i = 0; i < n; ++i) {
    const float g = gp[i] + l2 * th[i];
    const float mi = beta1 * mp[i] + (1.0f - beta1) * g;
    const float vi = beta2 * vp[i] + (1.0f - beta2) * g * g;
    mp[i] = mi;
    vp[i] = vi;
    const float denom = std::sqrt(vi) * inv_sqrt_c2 + epsilon;
    th[i] -= step_size * mi / denom + decay * th[i];
  }
}

TROUPE_CPU_CLONES void sgd_momentum_step(std::span<float> theta, std::span<float> velocity,
                                         std::span<const float> grad, float lr, float momentum,
                                         float weight_decay) {
  float* __restrict th = theta.data();
  float* __restrict u = velocity.data();
  const float* __restrict gp = grad.data();
  const size_t n = theta.size();
  if (momentum == 0.0f) {
    for (size_t i = 0; i < n; ++i) th[i] -= lr * (gp[i] + weight_decay * th[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float ui = momentum * u[i] + gp[i] + weight_decay * th[i];
    u[i] = ui;
    th[i] -= lr * ui;
  }
}

}  // namespace troupe::kernels
