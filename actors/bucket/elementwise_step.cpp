#include "actors/bucket/elementwise_step.hpp"

#include "kernels/cpu/optimizers.hpp"

namespace troupe {

bool elementwise(const optimizer_config& o) {
  using kind = optimizer_config::kind;
  return o.type == kind::sgd || o.type == kind::momentum || o.type == kind::adam ||
         o.type == kind::adamw || o.type == kind::nesterov || o.type == kind::delayed_nesterov;
}

kernels::adam_hyper adam_hyper_of(const optimizer_config& o, float lr, uint64_t t) {
  if (o.type == optimizer_config::kind::adamw)
    return {lr, o.beta1, o.beta2, o.epsilon, o.weight_decay, t};
  return {lr, o.beta1, o.beta2, o.epsilon, 0.0f, t, o.weight_decay};
}

bool step_elementwise(const optimizer_config& o, float lr, uint64_t t, std::span<float> theta,
                      std::span<float> m, std::span<float> v, std::span<const float> grad) {
  using kind = optimizer_config::kind;
  if (!elementwise(o)) return false;
  if (o.type == kind::adam || o.type == kind::adamw)
    kernels::adam_step(theta, m, v, grad, adam_hyper_of(o, lr, t));
  else if (o.type == kind::nesterov)
    kernels::nesterov_step(theta, m, grad, lr, o.beta1);
  else if (o.type == kind::delayed_nesterov)  // v: the pseudo-gradients since the last momentum
    kernels::delayed_nesterov_step(theta, m, v, grad, lr, o.beta1, o.delay, t);
  else  // sgd: no moment; momentum: m is the velocity
    kernels::sgd_momentum_step(theta, o.type == kind::sgd ? std::span<float>{} : m, grad, lr,
                               o.type == kind::sgd ? 0.0f : o.beta1, o.weight_decay);
  return true;
}

}  // namespace troupe
