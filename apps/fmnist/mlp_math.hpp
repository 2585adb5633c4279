// Forward and backward passes of the 784-256-128-10 ReLU MLP over raw fp32 buffers, with
// OpenBLAS sgemm. Internal to apps/fmnist (mlp_task.cpp and the check programs). Callers own
// every buffer; the functions keep no state and allocate nothing, so any thread may call them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace troupe::fmnist {

// One fully connected layer y = x W^T + b, W of shape [out, in], in the flat parameters.
struct dense_shape {
  uint32_t in;
  uint32_t out;
  size_t w_offset;
  size_t b_offset;
};

inline constexpr std::array<dense_shape, 3> mlp_layers{{
    {784, 256, 0, 200704},
    {256, 128, 200960, 233728},
    {128, 10, 233856, 235136},
}};
inline constexpr size_t mlp_parameter_count = 235146;

// Activations of up to `capacity` rows; the d* buffers only when built for backward.
struct mlp_buffers {
  size_t capacity = 0;
  std::vector<float> x;       // [rows, 784] normalised inputs
  std::vector<uint8_t> y;     // [rows] labels
  std::vector<float> h1;      // [rows, 256] after ReLU
  std::vector<float> h2;      // [rows, 128] after ReLU
  std::vector<float> logits;  // [rows, 10]
  std::vector<float> d1;      // [rows, 256] d(loss)/d(pre-activation 1)
  std::vector<float> d2;      // [rows, 128]
  std::vector<float> d3;      // [rows, 10]

  mlp_buffers(size_t rows, bool with_backward);
};

// Writes one image's 784 pixels, scaled to [0,1] and standardised, to x.
void normalize_image(std::span<const uint8_t> pixels, float* x);

// Fills b.h1, b.h2 and b.logits from b.x for the first `rows` rows.
void mlp_forward(const float* params, size_t rows, mlp_buffers& b);

struct batch_score {
  double loss_sum = 0;  // sum over rows of -log softmax(logits)[label]
  size_t correct = 0;   // rows whose arg-max logit is the label
};

// Numerically stable softmax cross-entropy of b.logits against b.y. When `with_grad`, also
// writes d(mean loss)/d(logits) to b.d3.
batch_score softmax_cross_entropy(size_t rows, mlp_buffers& b, bool with_grad);

// Back-propagates b.d3 (from softmax_cross_entropy) into `grad`, the full parameter gradient.
// `layer_done`, when given, is told each layer (2, 1, 0) as its w and b gradients are final.
void mlp_backward(const float* params, size_t rows, mlp_buffers& b, float* grad,
                  const std::function<void(size_t layer)>& layer_done = {});

}  // namespace troupe::fmnist
