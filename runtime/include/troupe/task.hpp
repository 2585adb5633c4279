// What a training app gives Troupe: the model's parameters, how to initialise them, how one
// worker computes gradients on a batch, and how to evaluate on held-out data. Dense parameters
// are one flat fp32 vector, the tensors of parameters() laid out one after another in that
// order. Sparse parameters are embedding tables (sparse_tables()): rows keyed by 64-bit ids,
// created on first use, of which a batch reads only the few rows it names (rows_of()).
// A training_task is shared and its const methods may be called from any thread; a
// task_replica belongs to one worker and is used only from that worker's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

namespace troupe {

struct tensor_spec {
  std::string name;
  std::vector<uint32_t> shape;  // row-major; the first dimension is split across buckets
  // A buffer is model state that is not trained (BatchNorm's running statistics): it travels,
  // is evaluated and checkpointed with the parameters, but its "gradient" slot holds its new
  // value after the step's forward pass, and --mode dp sets every member's to the first
  // member's (DDP's broadcast). Jobs in --mode ps refuse tasks with buffers.
  bool buffer = false;
};

// An embedding table: rows of `row_dim` values keyed by 64-bit ids, created on first use with
// values uniform in [-init_scale, init_scale] drawn from (seed, table, id), so every bucket
// creates the same row. Without eviction, a job refuses rows beyond `capacity` (the table's
// memory bound); with `evict` "lru", "lfu" or "ttl:SECONDS" the table keeps to about
// `capacity` rows by dropping the least recently or least often read ones (or those not read
// for SECONDS), and an evicted id that comes back starts again from its initial value. An id
// gets a row only from its `admit_after`-th sighting (read) on, at most 255: before that it
// reads as its initial value and its gradients are dropped (docs/tables.md).
struct table_spec {
  std::string name;
  uint32_t row_dim = 1;
  float init_scale = 0.0f;
  uint64_t capacity = uint64_t{1} << 22;
  std::string evict = "none";
  uint32_t admit_after = 1;
};

// The rows a batch (or the test set) reads, one entry per table in sparse_tables() order:
// ids sorted and unique, values ids.size() * row_dim (row i at i * row_dim). For a gradient,
// `grads` has the same layout and the replica adds each row's gradient into it.
struct sparse_rows_view {
  std::vector<std::vector<uint64_t>> ids;
  std::vector<std::vector<float>> values;
  std::vector<std::vector<float>> grads;
};

// What gradient_range() computed: the mean loss over the examples it used, and how many it
// used (fewer than asked at the end of an epoch).
struct range_result {
  double loss = 0;
  uint64_t count = 0;
};

// Told, from inside gradient_range(), that tensor `index` (in parameters() order) of the
// gradient holds its final value. Backward reports tensors as it finishes them, last layer
// first, so that their allreduce can start while the rest of backward runs.
using gradient_ready = std::function<void(size_t index)>;

// Told, from inside gradient_range_streamed(), the final gradient of tensor `index` (a buffer's
// value after the forward pass), its whole size; it is copied before the call returns, so the
// task may free its own copy then (FSDP frees .grad so). Called once per tensor, on the
// thread that called gradient_range_streamed(); a tensor never put counts as zeros.
using gradient_put = std::function<void(size_t index, std::span<const float> gradient)>;

struct evaluation {
  double accuracy = 0;
  double loss = 0;
};

class task_replica {
 public:
  virtual ~task_replica() = default;

  // Writes d(loss)/d(params) of batch `batch` (0 <= batch < batches_per_epoch) of `epoch`
  // into `grad` (same layout as params) and returns the batch's mean loss. Batch b of epoch e
  // must be the same examples in every replica of a job (same seed). A loss or gradient that
  // is not finite is a diverged step (the worker pushes nothing for it); an error (a batch it
  // cannot read, a gradient the task does not have) stops the worker with that error.
  virtual caf::expected<float> gradient(std::span<const float> params, uint32_t epoch,
                                        uint64_t batch, std::span<float> grad) = 0;

  // Data-parallel jobs: writes the mean gradient over examples first .. first + count - 1 of
  // `epoch`'s order into `grad` and returns their mean loss and how many there were (fewer
  // when the range runs past the epoch's end; 0 when it starts there). count is at most the
  // `batch` the replica was made with; gradient_range(p, e, b * batch, batch, g) is exactly
  // gradient(p, e, b, g). `ready`, when given, hears of each tensor as it is finished. The
  // default: the task does not support data-parallel jobs (errc::bad_configuration).
  virtual caf::expected<range_result> gradient_range(std::span<const float> params, uint32_t epoch,
                                                     uint64_t first, uint32_t count,
                                                     std::span<float> grad,
                                                     const gradient_ready& ready = {});

  // Data-parallel jobs under --zero-stage 2, where no member holds a whole gradient: as
  // gradient_range(), but each tensor's gradient handed to `put` as backward finishes it (the
  // task frees its own copy after). A task that does so says it in streams_gradients(); for
  // any other, the trainer computes the whole gradient with gradient_range() into a vector of
  // its own and puts it from there (right, without the memory saving). The rows version: the
  // same for --mode hybrid. The defaults: errc::bad_configuration.
  virtual bool streams_gradients() const { return false; }
  virtual caf::expected<range_result> gradient_range_streamed(std::span<const float> params,
                                                              uint32_t epoch, uint64_t first,
                                                              uint32_t count,
                                                              const gradient_put& put);
  virtual caf::expected<range_result> gradient_range_streamed(std::span<const float> params,
                                                              sparse_rows_view& rows,
                                                              uint32_t epoch, uint64_t first,
                                                              uint32_t count,
                                                              const gradient_put& put);

  // Tasks with sparse tables: the ids of the rows batch `batch` of `epoch` reads, per table
  // (sorted, unique). The default reads none.
  virtual std::vector<std::vector<uint64_t>> rows_of(uint32_t /*epoch*/, uint64_t /*batch*/) {
    return {};
  }

  // Tasks with sparse tables: as gradient(), with the rows the batch reads in `rows` (their
  // values filled in; grads sized like values and zeroed by the caller, to be added to). The
  // default ignores the rows.
  virtual caf::expected<float> gradient(std::span<const float> params, sparse_rows_view& /*rows*/,
                                        uint32_t epoch, uint64_t batch, std::span<float> grad) {
    return gradient(params, epoch, batch, grad);
  }

  // Data-parallel jobs of tasks with sparse tables (--mode hybrid): the rows that examples
  // first .. first + count - 1 of `epoch`'s order read, per table (sorted, unique), and their
  // gradient as the gradient() above computes a batch's: gradient_range(p, rows, e, b * batch,
  // batch, g) is exactly gradient(p, rows, e, b, g). The defaults: no rows, and
  // errc::bad_configuration.
  virtual std::vector<std::vector<uint64_t>> rows_of_range(uint32_t /*epoch*/, uint64_t /*first*/,
                                                           uint32_t /*count*/) {
    return {};
  }
  virtual caf::expected<range_result> gradient_range(std::span<const float> params,
                                                     sparse_rows_view& rows, uint32_t epoch,
                                                     uint64_t first, uint32_t count,
                                                     std::span<float> grad);
};

// A replica whose unit is a range of examples (the Python package's and troupe/torch.hpp's):
// batch b of an epoch is examples b * batch .. b * batch + batch - 1, so gradient(), rows_of()
// and gradient() with rows follow from the two gradient_range() and rows_of_range(), which a
// subclass gives.
class range_replica : public task_replica {
 public:
  explicit range_replica(uint32_t batch) : batch_(batch) {}

  caf::expected<float> gradient(std::span<const float> params, uint32_t epoch, uint64_t batch,
                                std::span<float> grad) override;
  std::vector<std::vector<uint64_t>> rows_of(uint32_t epoch, uint64_t batch) override;
  caf::expected<float> gradient(std::span<const float> params, sparse_rows_view& rows,
                                uint32_t epoch, uint64_t batch, std::span<float> grad) override;

 private:
  uint32_t batch_;
};

class training_task {
 public:
  virtual ~training_task() = default;

  virtual std::vector<tensor_spec> parameters() const = 0;

  // Fills `params` (total size of parameters()) deterministically from `seed`.
  virtual void initialize(uint64_t seed, std::span<float> params) const = 0;

  // Batches in one epoch (one pass over the training set) of `batch` examples each; with
  // batch 1, the examples in one epoch.
  virtual uint64_t batches_per_epoch(uint32_t batch) const = 0;

  // A replica for one worker. The coordinator hands batches out to workers as they ask for
  // them, so a replica must be able to compute any batch of any epoch (faster workers do more).
  virtual caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                                    uint64_t seed) const = 0;

  // Accuracy and mean loss on the held-out set.
  virtual evaluation evaluate(std::span<const float> params) const = 0;

  // Tasks with sparse tables: the tables (none by default), the rows evaluation reads (per
  // table, sorted and unique), and the evaluation with those rows' values filled in.
  virtual std::vector<table_spec> sparse_tables() const { return {}; }
  virtual std::vector<std::vector<uint64_t>> evaluation_rows() const { return {}; }
  virtual evaluation evaluate(std::span<const float> params,
                              const sparse_rows_view& /*rows*/) const {
    return evaluate(params);
  }

  // Extra figures for the report, computed on the held-out set (e.g. {"test_auc", 0.71});
  // empty by default.
  virtual std::vector<std::pair<std::string, double>> report_figures(
      std::span<const float> /*params*/, const sparse_rows_view& /*rows*/) const {
    return {};
  }
};

}  // namespace troupe
