// Test helper: a task that poisons one example's gradient (NaN, or a value too large to
// apply), for the tests of how a data-parallel group skips a step. For tests only.
#pragma once

#include <limits>
#include <memory>

#include "forwarding_task.hpp"
#include "troupe/task.hpp"

namespace troupe::testing {

// fmnist, but the member that computes example `poisoned` of epoch 0 gets `bad` (NaN by
// default) in its gradient. Its replicas tell no tensor final during backward (so that no
// bucket goes out before the poison is in).
class poisoned_task : public forwarding_task {
 public:
  poisoned_task(std::shared_ptr<const training_task> inner, uint64_t poisoned,
                float bad = std::numeric_limits<float>::quiet_NaN())
      : forwarding_task(std::move(inner)), poisoned_(poisoned), bad_(bad) {}
  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                            uint64_t seed) const override;

 private:
  uint64_t poisoned_;
  float bad_;
};

class poisoned_replica : public task_replica {
 public:
  poisoned_replica(std::unique_ptr<task_replica> inner, uint64_t poisoned, float bad)
      : inner_(std::move(inner)), poisoned_(poisoned), bad_(bad) {}
  caf::expected<float> gradient(std::span<const float> p, uint32_t e, uint64_t b,
                                std::span<float> g) override {
    return inner_->gradient(p, e, b, g);
  }
  caf::expected<range_result> gradient_range(std::span<const float> p, uint32_t epoch,
                                             uint64_t first, uint32_t count, std::span<float> g,
                                             const gradient_ready&) override {
    auto done = inner_->gradient_range(p, epoch, first, count, g);
    if (done && epoch == 0 && first <= poisoned_ && poisoned_ < first + count) g[12345] = bad_;
    return done;
  }

 private:
  std::unique_ptr<task_replica> inner_;
  uint64_t poisoned_;
  float bad_;
};

inline caf::expected<std::unique_ptr<task_replica>> poisoned_task::make_replica(
    uint32_t batch, uint64_t seed) const {
  auto inner = inner_->make_replica(batch, seed);
  if (!inner) return std::move(inner.error());
  return std::unique_ptr<task_replica>(new poisoned_replica(std::move(*inner), poisoned_, bad_));
}

}  // namespace troupe::testing
