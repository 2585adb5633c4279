#include "kernels/cpu/optimizers.hpp"
#include "kernels/cpu/vector_ops.hpp"

#include <cmath>

namespace troupe::kernels {

namespace {

// Adam's per-step constants, worked out once per call.
struct adam_coefficients {
  float step_size, inv_sqrt_c2, beta1, beta2, epsilon, l2, decay;
};

adam_coefficients coefficients_of(const adam_hyper& h) {
  const double t = static_cast<double>(h.step);
  const float correction1 = static_cast<float>(1.0 - std::pow(double{h.beta1}, t));
  const float correction2 = static_cast<float>(1.0 - std::pow(double{h.beta2}, t));
  return {h.lr / correction1,   1.0f / std::sqrt(correction2), h.beta1, h.beta2, h.epsilon, h.l2,
          h.lr * h.weight_decay};
}

// One value's update (inlined into each loop, which then vectorises).
[[gnu::always_inline]] inline void adam_update(float g, float& th, float& m, float& v,
                                               const adam_coefficients& c) {
  g += c.l2 * th;
  const float mi = c.beta1 * m + (1.0f - c.beta1) * g;
  const float vi = c.beta2 * v + (1.0f - c.beta2) * g * g;
  m = mi;
  v = vi;
  const float denom = std::sqrt(vi) * c.inv_sqrt_c2 + c.epsilon;
  th -= c.step_size * mi / denom + c.decay * th;
}

}  // namespace

// Restrict-qualified pointers: stores to m, v, theta cannot change each other or the
// gradient, so the loops vectorise.
TROUPE_CPU_CLONES void adam_step(std::span<float> theta, std::span<float> m, std::span<float> v,
                                 std::span<const float> grad, const adam_hyper& h) {
  const auto c = coefficients_of(h);
  float* __restrict th = theta.data();
  float* __restrict mp = m.data();
  float* __restrict vp = v.data();
  const float* __restrict gp = grad.data();
  const size_t n = theta.size();
  for (size_t i = 0; i < n; ++i) adam_update(gp[i], th[i], mp[i], vp[i], c);
}

TROUPE_CPU_CLONES void adam_dcasgd_step(std::span<float> theta, std::span<float> m,
                                        std::span<float> v, std::span<const float> grad,
                                        std::span<const float> theta_read, float lambda,
                                        const adam_hyper& h) {
  const auto c = coefficients_of(h);
  float* __restrict th = theta.data();
  float* __restrict mp = m.data();
  float* __restrict vp = v.data();
  const float* __restrict gp = grad.data();
  const float* __restrict then = theta_read.data();
  const size_t n = theta.size();
  for (size_t i = 0; i < n; ++i) {
    const float g = gp[i];
    adam_update(g + lambda * g * g * (th[i] - then[i]), th[i], mp[i], vp[i], c);
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

TROUPE_CPU_CLONES void nesterov_step(std::span<float> theta, std::span<float> velocity,
                                     std::span<const float> grad, float lr, float momentum) {
  float* __restrict th = theta.data();
  float* __restrict u = velocity.data();
  const float* __restrict gp = grad.data();
  const size_t n = theta.size();
  for (size_t i = 0; i < n; ++i) {
    const float ui = momentum * u[i] + gp[i];
    u[i] = ui;
    th[i] -= lr * (gp[i] + momentum * ui);
  }
}

TROUPE_CPU_CLONES void delayed_nesterov_step(std::span<float> theta, std::span<float> velocity,
                                             std::span<float> buffer, std::span<const float> grad,
                                             float lr, float momentum, uint32_t delay, uint64_t t) {
  float* __restrict th = theta.data();
  float* __restrict u = velocity.data();
  float* __restrict b = buffer.data();
  const float* __restrict gp = grad.data();
  const size_t n = theta.size();
  const uint32_t every = delay == 0 ? 1 : delay;
  const float inv = 1.0f / static_cast<float>(every);
  if (t % every != 0) {  // between momentum steps: the arrival alone, buffered
    for (size_t i = 0; i < n; ++i) {
      b[i] += gp[i];
      th[i] -= lr * inv * gp[i];
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float ui = momentum * u[i] + (b[i] + gp[i]) * inv;
    u[i] = ui;
    th[i] -= lr * (inv * gp[i] + momentum * ui);
    b[i] = 0.0f;
  }
}

}  // namespace troupe::kernels
