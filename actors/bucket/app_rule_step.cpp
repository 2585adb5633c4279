#include "actors/bucket/app_rule_step.hpp"

#include "kernels/cpu/vector_ops.hpp"

namespace troupe {

unsigned moments_of(const optimizer_config& o, const std::optional<update_rule>& rule) {
  using kind = optimizer_config::kind;
  switch (o.type) {
    case kind::sgd:
      return 0;
    case kind::momentum:
    case kind::nesterov:
      return 1;
    case kind::adam:
    case kind::adamw:
    case kind::dash:
    case kind::delayed_nesterov:
      return 2;
    case kind::app:
      return rule ? rule->moments : 0;
  }
  return 0;
}

bool step_app_rule(const std::optional<update_rule>& rule, const optimizer_config& o,
                   std::span<float> theta, std::span<float> m, std::span<float> v,
                   std::span<const float> grad, uint64_t step, float lr) {
  if (!rule) return false;
  rule->apply(update_args{theta, grad, m, v, step, lr, &o});
  return kernels::all_finite(theta) && kernels::all_finite(m) && kernels::all_finite(v);
}

}  // namespace troupe
