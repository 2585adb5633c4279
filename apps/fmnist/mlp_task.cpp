#include "apps/fmnist/mlp_task.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "apps/fmnist/mlp_math.hpp"
#include "troupe/error.hpp"
#include "troupe/random.hpp"

namespace troupe::fmnist {
namespace {

constexpr size_t eval_chunk = 1000;
constexpr int64_t no_epoch = -1;

// Copies the examples `indices` of `data` into the first rows of b.x and b.y.
void load_rows(const dataset& data, std::span<const uint32_t> indices, mlp_buffers& b) {
  for (size_t r = 0; r < indices.size(); ++r) {
    normalize_image(data.image(indices[r]), b.x.data() + r * image_size);
    b.y[r] = data.labels[indices[r]];
  }
}

// Any batch of any epoch: the whole training set in the epoch's shuffled order (the same in
// every replica of a job), and preallocated activations for one batch.
class fmnist_replica : public task_replica {
 public:
  fmnist_replica(std::shared_ptr<const dataset> train, const mlp_shape& shape, uint32_t batch,
                 uint64_t seed)
      : train_(std::move(train)),
        shape_(shape),
        batch_(batch),
        seed_(seed),
        buffers_(shape, std::min<size_t>(batch, train_->size()), true) {
    order_.reserve(train_->size());
  }

  caf::expected<float> gradient(std::span<const float> params, uint32_t epoch, uint64_t batch,
                                std::span<float> grad) override {
    auto done = gradient_range(params, epoch, batch * batch_, batch_, grad, {});
    if (!done) return std::move(done.error());
    if (done->count == 0)
      return make_error(errc::bad_configuration, "fmnist: a batch past the epoch's end");
    return static_cast<float>(done->loss);
  }

  // Tensors 2l and 2l + 1 (fc{l+1}.w and .b) are final once backward has passed layer l.
  caf::expected<range_result> gradient_range(std::span<const float> params, uint32_t epoch,
                                             uint64_t first, uint32_t count, std::span<float> grad,
                                             const gradient_ready& ready) override {
    if (grad.size() != shape_.parameter_count)
      return make_error(errc::shape_mismatch, "fmnist: a gradient of the wrong size");
    auto forward = forward_range(params, epoch, first, count);
    if (!forward) return std::move(forward.error());
    if (forward->rows == 0) return range_result{0, 0};
    const auto [rows, score] = *forward;
    std::function<void(size_t)> layer_done;
    if (ready)
      layer_done = [&](size_t layer) {
        ready(2 * layer + 1);
        ready(2 * layer);
      };
    mlp_backward(shape_, params.data(), rows, buffers_, grad.data(), layer_done);
    return range_result{score.loss_sum / static_cast<double>(rows), rows};
  }

  // --zero-stage 2: each layer's gradient into one scratch of the largest layer's size, put
  // (tensors 2l + 1 and 2l) once backward has passed layer l.
  bool streams_gradients() const override { return true; }
  caf::expected<range_result> gradient_range_streamed(std::span<const float> params, uint32_t epoch,
                                                      uint64_t first, uint32_t count,
                                                      const gradient_put& put) override {
    auto forward = forward_range(params, epoch, first, count);
    if (!forward) return std::move(forward.error());
    if (forward->rows == 0) return range_result{0, 0};
    const auto [rows, score] = *forward;
    size_t largest = 0;
    for (const auto& l : shape_.layers) largest = std::max(largest, size_t{l.in} * l.out + l.out);
    layer_scratch_.resize(largest);
    auto into = [&](size_t l) {
      return layer_gradient{
          layer_scratch_.data(),
          layer_scratch_.data() + size_t{shape_.layers[l].in} * shape_.layers[l].out};
    };
    auto layer_done = [&](size_t l) {
      const auto& layer = shape_.layers[l];
      const std::span<const float> scratch(layer_scratch_);
      put(2 * l + 1, scratch.subspan(size_t{layer.in} * layer.out, layer.out));
      put(2 * l, scratch.first(size_t{layer.in} * layer.out));
    };
    mlp_backward(shape_, params.data(), rows, buffers_, into, layer_done);
    return range_result{score.loss_sum / static_cast<double>(rows), rows};
  }

 private:
  struct forward_pass {
    size_t rows = 0;  // examples loaded (0: the range is past the epoch's end)
    batch_score score;
  };

  // The forward pass of examples first .. first + count - 1 of `epoch`'s order, with the
  // loss's gradient in the buffers, ready for mlp_backward.
  caf::expected<forward_pass> forward_range(std::span<const float> params, uint32_t epoch,
                                            uint64_t first, uint32_t count) {
    if (params.size() != shape_.parameter_count)
      return make_error(errc::shape_mismatch, "fmnist: parameters of the wrong size");
    if (count > batch_)
      return make_error(errc::bad_configuration, "fmnist: a range of " + std::to_string(count) +
                                                     " examples in a replica made for " +
                                                     std::to_string(batch_));
    forward_pass out;
    out.rows = load_range(epoch, first, count);
    if (out.rows == 0) return out;
    mlp_forward(shape_, params.data(), out.rows, buffers_);
    out.score = softmax_cross_entropy(out.rows, buffers_, true);
    return out;
  }

  // Fills the buffers with examples first .. first + count - 1 of `epoch`'s order (fewer past
  // its end) and returns how many it loaded.
  size_t load_range(uint32_t epoch, uint64_t first, uint32_t count) {
    if (epoch_ != epoch) {
      order_.resize(train_->size());
      for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<uint32_t>(i);
      shuffle(order_, epoch_seed(seed_, epoch));
      epoch_ = epoch;
    }
    if (first >= order_.size()) return 0;
    const size_t rows = std::min<size_t>(count, order_.size() - first);
    load_rows(*train_, std::span<const uint32_t>(order_).subspan(first, rows), buffers_);
    return rows;
  }

  std::shared_ptr<const dataset> train_;
  mlp_shape shape_;
  std::vector<float> layer_scratch_;  // --zero-stage 2: one layer's gradient at a time
  uint32_t batch_;
  uint64_t seed_;
  std::vector<uint32_t> order_;  // every example index, shuffled for epoch_
  int64_t epoch_ = no_epoch;
  mlp_buffers buffers_;
};

}  // namespace

fmnist_task::fmnist_task(dataset train, dataset test, mlp_shape shape)
    : train_(std::make_shared<const dataset>(std::move(train))),
      test_(std::make_shared<const dataset>(std::move(test))),
      shape_(std::move(shape)) {}

std::vector<tensor_spec> fmnist_task::parameters() const {
  std::vector<tensor_spec> specs;
  for (size_t i = 0; i < shape_.layers.size(); ++i) {
    const auto& l = shape_.layers[i];
    const std::string name = "fc" + std::to_string(i + 1);
    specs.push_back({name + ".w", {l.out, l.in}});
    specs.push_back({name + ".b", {l.out}});
  }
  return specs;
}

void fmnist_task::initialize(uint64_t seed, std::span<float> params) const {
  if (params.size() != shape_.parameter_count) return;
  std::mt19937_64 gen(seed);
  for (const auto& l : shape_.layers) {
    const float bound = std::sqrt(6.0f / static_cast<float>(l.in));
    auto w = params.subspan(l.w_offset, size_t{l.out} * l.in);
    for (float& v : w) v = (2.0f * unit_float(gen()) - 1.0f) * bound;
    auto b = params.subspan(l.b_offset, l.out);
    std::fill(b.begin(), b.end(), 0.0f);
  }
}

uint64_t fmnist_task::batches_per_epoch(uint32_t batch) const {
  return batch ? (train_->size() + batch - 1) / batch : 0;
}

caf::expected<std::unique_ptr<task_replica>> fmnist_task::make_replica(uint32_t batch,
                                                                       uint64_t seed) const {
  if (train_->empty())
    return make_error(errc::bad_configuration,
                      "fmnist: no training data loaded (task built for evaluation only)");
  if (batch == 0) return make_error(errc::bad_configuration, "fmnist: batch size 0");
  return std::make_unique<fmnist_replica>(train_, shape_, batch, seed);
}

evaluation fmnist_task::evaluate(std::span<const float> params) const {
  const size_t n = test_->size();
  if (params.size() != shape_.parameter_count) return {0, std::numeric_limits<double>::quiet_NaN()};
  if (n == 0) return {};
  mlp_buffers buffers(shape_, std::min(eval_chunk, n), false);
  std::vector<uint32_t> indices(buffers.capacity);
  batch_score total;
  for (size_t begin = 0; begin < n; begin += eval_chunk) {
    const size_t rows = std::min(eval_chunk, n - begin);
    for (size_t r = 0; r < rows; ++r) indices[r] = static_cast<uint32_t>(begin + r);
    load_rows(*test_, std::span<const uint32_t>(indices).first(rows), buffers);
    mlp_forward(shape_, params.data(), rows, buffers);
    batch_score s = softmax_cross_entropy(rows, buffers, false);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
  }
  return {static_cast<double>(total.correct) / static_cast<double>(n),
          total.loss_sum / static_cast<double>(n)};
}

caf::expected<std::unique_ptr<training_task>> make_fmnist_task(
    const std::string& data_dir, size_t train_limit, size_t test_limit,
    const std::vector<uint32_t>& hidden) {
  auto shape = mlp_shape::of(hidden);
  if (!shape) return shape.error();
  auto data = load_fashion_mnist(data_dir, train_limit, test_limit);
  if (!data) return data.error();
  return std::make_unique<fmnist_task>(std::move(data->train), std::move(data->test),
                                       std::move(*shape));
}

}  // namespace troupe::fmnist
