// A test task that wraps another and forwards what it does not change: its parameters,
// initialisation, batches and evaluation. Tests derive from it to rig the replicas' gradients
// (diloco_test, dp_zero_test, poisoned_task.hpp). For tests only.
#pragma once

#include <memory>

#include "troupe/task.hpp"

namespace troupe::testing {

class forwarding_task : public training_task {
 public:
  explicit forwarding_task(std::shared_ptr<const training_task> inner) : inner_(std::move(inner)) {}
  std::vector<tensor_spec> parameters() const override { return inner_->parameters(); }
  void initialize(uint64_t seed, std::span<float> p) const override { inner_->initialize(seed, p); }
  uint64_t batches_per_epoch(uint32_t b) const override { return inner_->batches_per_epoch(b); }
  evaluation evaluate(std::span<const float> p) const override { return inner_->evaluate(p); }

 protected:
  std::shared_ptr<const training_task> inner_;
};

}  // namespace troupe::testing
