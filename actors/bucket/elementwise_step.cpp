#include "actors/bucket/elementwise_step.hpp"

#include "kernels/cpu/optimizers.hpp"

namespace troupe {

kernels::adam_hyper adam_hyper_of(const optimizer_config& o, float lr, uint64_t t) {
  if (o.type == optimizer_config::kind::adamw)
    return {lr, o.beta1, o.beta2, o.epsilon, o.weight_decay, t};
  return {lr, o.beta1, o.beta2, o.epsilon, 0.0f, t, o.weight_decay};
}

bool step_elementwise(const optimizer_config& o, float lr, uint64_t t, std::span<float> theta,
                      std::span<float> m, std::span<float> v, std::span<const float> grad) {
  using kind = optimizer_config::kind;
  switch (o.type) {
    case kind::sgd:
      kernels::sgd_momentum_step(theta, {}, grad, lr, 0.0f, o.weight_decay);
      return true;
    case kind::momentum:
      kernels::sgd_momentum_step(theta, m, grad, lr, o.beta1, o.weight_decay);
      return true;
    case kind::adam:
    case kind::adamw:
      kernels::adam_step(theta, m, v, grad, adam_hyper_of(o, lr, t));
      return true;
    case kind::dash:
    case kind::app:
      break;
  }
  return false;
}

}  // namespace troupe
