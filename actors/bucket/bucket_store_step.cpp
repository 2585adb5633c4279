// A bucket's optimizer step on its dense slices: each optimizer's kernel, and for the ones
// that update every value on its own, delay compensation and the step fused block by block
// (kernels/cpu/optimizers.hpp, compensation.hpp).
#include <array>

#include "actors/bucket/app_rule_step.hpp"
#include "actors/bucket/bucket_store.hpp"
#include "kernels/cpu/optimizers.hpp"

namespace troupe {

using opt_kind = optimizer_config::kind;
using dc_kind = compensation_config::kind;

float bucket_store::step_lr(uint64_t staleness) const {
  const auto& o = optimizer_;
  return o.lr_staleness ? o.lr / (1.0f + static_cast<float>(staleness)) : o.lr;
}

bool bucket_store::elementwise() const {
  switch (optimizer_.type) {
    case opt_kind::sgd:
    case opt_kind::momentum:
    case opt_kind::adam:
    case opt_kind::adamw:
      return true;
    case opt_kind::dash:
    case opt_kind::app:
      break;
  }
  return false;
}

kernels::adam_hyper bucket_store::adam_step_hyper(float lr) const {
  const auto& o = optimizer_;
  if (o.type == opt_kind::adamw)
    return {lr, o.beta1, o.beta2, o.epsilon, o.weight_decay, version_ + 1};
  // Adam's weight decay is an L2 term of the gradient.
  return {lr, o.beta1, o.beta2, o.epsilon, 0.0f, version_ + 1, o.weight_decay};
}

void bucket_store::step_elements(size_t slice, size_t first, std::span<const float> grad,
                                 float lr) {
  const auto& o = optimizer_;
  const auto part = [&](std::vector<float>& all) {
    return std::span<float>(all).subspan(first, grad.size());
  };
  auto theta = part(slices_[slice].values);
  switch (o.type) {
    case opt_kind::sgd:
      return kernels::sgd_momentum_step(theta, {}, grad, lr, 0.0f, o.weight_decay);
    case opt_kind::momentum:
      return kernels::sgd_momentum_step(theta, part(first_moment_[slice]), grad, lr, o.beta1,
                                        o.weight_decay);
    case opt_kind::adam:
    case opt_kind::adamw:
      return kernels::adam_step(theta, part(first_moment_[slice]), part(second_moment_[slice]),
                                grad, adam_step_hyper(lr));
    case opt_kind::dash:
    case opt_kind::app:
      return;
  }
}

bool bucket_store::step(size_t slice, std::vector<float>& grad, uint64_t staleness) {
  auto& theta = slices_[slice].values;
  const auto& o = optimizer_;
  const float lr = step_lr(staleness);
  switch (o.type) {
    case opt_kind::sgd:
    case opt_kind::momentum:
    case opt_kind::adam:
    case opt_kind::adamw:
      step_elements(slice, 0, grad, lr);
      return true;
    case opt_kind::dash:
      if (!dash_[slice])
        kernels::adam_step(theta, first_moment_[slice], second_moment_[slice], grad,
                           {lr, o.beta1, o.beta2, o.epsilon, o.weight_decay, version_ + 1});
      else if (device_steps(slice))
        deferred_.push_back(deferred_step{slice, grad, version_ + 1, lr});  // grad may be reused
      else
        dash_resets_ += dash_[slice]->step(theta, grad, first_moment_[slice], second_moment_[slice],
                                           version_ + 1, lr);
      return true;
    case opt_kind::app:
      return step_app_rule(rule_, o, theta, first_moment_[slice], second_moment_[slice], grad,
                           version_ + 1, lr);
  }
  return true;
}

bool bucket_store::adam_dcasgd() const {
  return compensation_.type == dc_kind::dcasgd &&
         (optimizer_.type == opt_kind::adam || optimizer_.type == opt_kind::adamw);
}

bool bucket_store::compensates(uint32_t worker) const {
  return compensation_.type != dc_kind::none && !read_[worker].empty();
}

bool bucket_store::compensate_and_step(uint32_t worker, size_t slice, std::span<const float> grad,
                                       uint64_t staleness) {
  if (!elementwise()) {
    std::vector<float> whole(grad.begin(), grad.end());  // compensated and stepped as a whole
    compensate(worker, slice, 0, whole);
    return step(slice, whole, staleness);
  }
  const float lr = step_lr(staleness);
  const bool compensated = compensates(worker);
  if (compensated && adam_dcasgd()) {  // one kernel: every array streams through it once
    kernels::adam_dcasgd_step(slices_[slice].values, first_moment_[slice], second_moment_[slice],
                              grad, read_[worker][slice], compensation_.lambda,
                              adam_step_hyper(lr));
    return true;
  }
  // 16 KiB of each array per block: gradient, values, moments and the read copy stay in L1/L2
  // from the compensation to the step, so each comes from memory once. Without compensation
  // the step reads the gradient where it is.
  constexpr size_t block = 4096;
  std::array<float, block> copy;  // on the stack: no allocation per push
  for (size_t first = 0; first < grad.size(); first += block) {
    auto part = grad.subspan(first, std::min(block, grad.size() - first));
    if (compensated) {
      const std::span<float> mine{copy.data(), part.size()};
      std::copy(part.begin(), part.end(), mine.begin());
      compensate(worker, slice, first, mine);
      part = mine;
    }
    step_elements(slice, first, part, lr);
  }
  return true;
}

}  // namespace troupe
