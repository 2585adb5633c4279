// Forward and backward passes of a ReLU MLP 784 -> hidden widths -> 10 (by default
// 784-256-128-10) over raw fp32 buffers, with OpenBLAS sgemm. Internal to apps/fmnist
// (mlp_task.cpp and the check programs) and the training benchmark. Callers own every buffer;
// the functions keep no state and allocate nothing, so any thread may call them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <caf/expected.hpp>

#include "apps/fmnist/mnist_data.hpp"

namespace troupe::fmnist {

// The hidden widths of troupe-fmnist's default model (--hidden 256,128).
inline const std::vector<uint32_t> default_hidden{256, 128};
// The widest hidden layer --hidden takes.
inline constexpr uint32_t max_hidden_width = 1u << 16;

// One fully connected layer y = x W^T + b, W of shape [out, in], in the flat parameters.
struct dense_shape {
  uint32_t in;
  uint32_t out;
  size_t w_offset;
  size_t b_offset;
};

// The layers of an MLP in its flat parameters: each layer's w, then its b, layer after layer.
struct mlp_shape {
  std::vector<dense_shape> layers;
  size_t parameter_count = 0;

  // image_size (784) -> hidden[0] -> ... -> 10; no hidden widths: one layer 784 -> 10. A width of 0
  // or over max_hidden_width is errc::bad_configuration.
  static caf::expected<mlp_shape> of(const std::vector<uint32_t>& hidden);
};

// Activations of up to `capacity` rows; the gradients only when built for backward.
struct mlp_buffers {
  size_t capacity = 0;
  std::vector<float> x;                 // [rows, 784] normalised inputs
  std::vector<uint8_t> y;               // [rows] labels
  std::vector<std::vector<float>> out;  // per layer: [rows, out], after ReLU; the last: logits
  std::vector<std::vector<float>> d;    // per layer: d(loss)/d(its pre-activation)

  mlp_buffers(const mlp_shape& shape, size_t rows, bool with_backward);
  std::vector<float>& logits() { return out.back(); }
};

// Writes one image's 784 pixels, scaled to [0,1] and standardised, to x.
void normalize_image(std::span<const uint8_t> pixels, float* x);

// Fills every layer's output in b from b.x for the first `rows` rows.
void mlp_forward(const mlp_shape& shape, const float* params, size_t rows, mlp_buffers& b);

struct batch_score {
  double loss_sum = 0;  // sum over rows of -log softmax(logits)[label]
  size_t correct = 0;   // rows whose arg-max logit is the label
};

// Numerically stable softmax cross-entropy of b's logits against b.y. When `with_grad`, also
// writes d(mean loss)/d(logits) to b.d.back().
batch_score softmax_cross_entropy(size_t rows, mlp_buffers& b, bool with_grad);

// Back-propagates b.d.back() (from softmax_cross_entropy) into `grad`, the full parameter
// gradient. `layer_done`, when given, is told each layer (last first) as its w and b gradients
// are final.
void mlp_backward(const mlp_shape& shape, const float* params, size_t rows, mlp_buffers& b,
                  float* grad, const std::function<void(size_t layer)>& layer_done = {});

// Where layer l's gradient goes: its weights' (out x in) and its biases' (out).
struct layer_gradient {
  float* w = nullptr;
  float* b = nullptr;
};
// The same, each layer's gradient where `into` says (so that it need not be the whole
// gradient's), told to `layer_done` once written.
void mlp_backward(const mlp_shape& shape, const float* params, size_t rows, mlp_buffers& b,
                  const std::function<layer_gradient(size_t layer)>& into,
                  const std::function<void(size_t layer)>& layer_done);

}  // namespace troupe::fmnist
