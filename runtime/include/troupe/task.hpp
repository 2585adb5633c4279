// What a training app gives Troupe: the model's parameters, how to initialise them, how one
// worker computes gradients on its shard, and how to evaluate on held-out data. Parameters are
// one flat fp32 vector, the tensors of parameters() laid out one after another in that order.
// A training_task is shared and its const methods may be called from any thread; a
// task_replica belongs to one worker and is used only from that worker's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace troupe {

struct tensor_spec {
  std::string name;
  std::vector<uint32_t> shape;  // row-major; the first dimension is split across buckets
};

struct evaluation {
  double accuracy = 0;
  double loss = 0;
};

class task_replica {
 public:
  virtual ~task_replica() = default;

  // Writes d(loss)/d(params) of batch `batch` (0 <= batch < batches_per_epoch) of `epoch`
  // into `grad` (same layout as params) and returns the batch's mean loss. Batch b of epoch e
  // must be the same examples in every replica of a job (same seed).
  virtual float gradient(std::span<const float> params, uint32_t epoch, uint64_t batch,
                         std::span<float> grad) = 0;
};

class training_task {
 public:
  virtual ~training_task() = default;

  virtual std::vector<tensor_spec> parameters() const = 0;

  // Fills `params` (total size of parameters()) deterministically from `seed`.
  virtual void initialize(uint64_t seed, std::span<float> params) const = 0;

  // Batches in one epoch (one pass over the training set) of `batch` examples each.
  virtual uint64_t batches_per_epoch(uint32_t batch) const = 0;

  // A replica for one worker. The coordinator hands batches out to workers as they ask for
  // them, so a replica must be able to compute any batch of any epoch (faster workers do more).
  virtual caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                                    uint64_t seed) const = 0;

  // Accuracy and mean loss on the held-out set.
  virtual evaluation evaluate(std::span<const float> params) const = 0;
};

}  // namespace troupe
