// The Fashion-MNIST training task: an MLP 784 -> hidden widths -> 10 (by default 784-256-128-10,
// --hidden in troupe-fmnist) with ReLU and softmax cross-entropy
// over data loaded by mnist_data.hpp. Built once per process by make_fmnist_task (from an app's
// make_task); the task is immutable and its const methods may be called from any thread. Each
// replica it makes belongs to one worker thread and shares the training set read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "apps/fmnist/mlp_math.hpp"
#include "apps/fmnist/mnist_data.hpp"
#include "troupe/task.hpp"

namespace troupe::fmnist {

// Parameters, in this order: fc1.w [h1,784], fc1.b [h1], fc2.w [h2,h1], fc2.b [h2], ...,
// fcN.w [10,hN-1], fcN.b [10]. Inputs are pixel/255 standardised by the data set's mean/std.
class fmnist_task : public training_task {
 public:
  // Either set may be empty: a coordinator needs only `test`; without `train`, make_replica
  // returns errc::bad_configuration, and without `test`, evaluate returns {0, 0}.
  fmnist_task(dataset train, dataset test, mlp_shape shape);

  std::vector<tensor_spec> parameters() const override;

  // Weights uniform in +-sqrt(6 / fan_in) (He/Kaiming) from std::mt19937_64(seed); zero
  // biases. Leaves `params` untouched unless its size is the parameter count.
  void initialize(uint64_t seed, std::span<float> params) const override;

  // Batches of `batch` examples over the whole training set (the last may be smaller).
  uint64_t batches_per_epoch(uint32_t batch) const override;

  // Any batch of any epoch: epoch e visits every training example in an order shuffled from
  // (seed, e), the same in every replica, in batches of `batch`.
  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                            uint64_t seed) const override;

  // Accuracy and mean loss over the whole test set, 1000 examples per sgemm chunk.
  evaluation evaluate(std::span<const float> params) const override;

 private:
  std::shared_ptr<const dataset> train_;
  std::shared_ptr<const dataset> test_;
  mlp_shape shape_;
};

// Loads at most train_limit / test_limit examples of each split from `data_dir` (a limit of 0
// loads none of that split, all_examples loads every one) and builds the task on them, with
// the MLP's `hidden` widths.
caf::expected<std::unique_ptr<training_task>> make_fmnist_task(
    const std::string& data_dir, size_t train_limit, size_t test_limit,
    const std::vector<uint32_t>& hidden = default_hidden);

}  // namespace troupe::fmnist
