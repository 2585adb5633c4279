#include "apps/fmnist/mlp_math.hpp"

#include <algorithm>
#include <cmath>

#include <cblas.h>

namespace troupe::fmnist {
namespace {

// Fashion-MNIST training-set statistics of pixel / 255.
constexpr float pixel_mean = 0.2860f;
constexpr float pixel_std = 0.3530f;

constexpr bool layers_are_contiguous() {
  size_t next = 0;
  for (const auto& l : mlp_layers) {
    if (l.w_offset != next || l.b_offset != next + size_t{l.in} * l.out) return false;
    next = l.b_offset + l.out;
  }
  return next == mlp_parameter_count;
}
static_assert(layers_are_contiguous());
static_assert(mlp_layers[1].in == mlp_layers[0].out && mlp_layers[2].in == mlp_layers[1].out);

// y[rows, out] = x[rows, in] W^T + b.
void dense_forward(const float* params, const dense_shape& l, const float* x, size_t rows,
                   float* y) {
  const float* w = params + l.w_offset;
  const float* bias = params + l.b_offset;
  for (size_t r = 0; r < rows; ++r) std::copy(bias, bias + l.out, y + r * l.out);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
              static_cast<int>(l.out), static_cast<int>(l.in), 1.0f, x, static_cast<int>(l.in), w,
              static_cast<int>(l.in), 1.0f, y, static_cast<int>(l.out));
}

void relu(float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = std::max(y[i], 0.0f);
}

// From dy[rows, out]: dW = dy^T x, db = column sums of dy, and (when dx) dx = dy W.
void dense_backward(const float* params, const dense_shape& l, const float* x, const float* dy,
                    size_t rows, float* grad, float* dx) {
  const int m = static_cast<int>(rows);
  const int in = static_cast<int>(l.in);
  const int out = static_cast<int>(l.out);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, m, 1.0f, dy, out, x, in, 0.0f,
              grad + l.w_offset, in);
  float* db = grad + l.b_offset;
  std::fill(db, db + l.out, 0.0f);
  for (size_t r = 0; r < rows; ++r)
    for (size_t o = 0; o < l.out; ++o) db[o] += dy[r * l.out + o];
  if (dx == nullptr) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, in, out, 1.0f, dy, out,
              params + l.w_offset, in, 0.0f, dx, in);
}

// dh *= (h > 0): through the ReLU whose output was h.
void relu_backward(const float* h, float* dh, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (h[i] <= 0.0f) dh[i] = 0.0f;
}

}  // namespace

mlp_buffers::mlp_buffers(size_t rows, bool with_backward)
    : capacity(rows),
      x(rows * mlp_layers[0].in),
      y(rows),
      h1(rows * mlp_layers[0].out),
      h2(rows * mlp_layers[1].out),
      logits(rows * mlp_layers[2].out) {
  if (!with_backward) return;
  d1.resize(h1.size());
  d2.resize(h2.size());
  d3.resize(logits.size());
}

void normalize_image(std::span<const uint8_t> pixels, float* x) {
  constexpr float scale = 1.0f / (255.0f * pixel_std);
  constexpr float shift = pixel_mean / pixel_std;
  for (size_t i = 0; i < pixels.size(); ++i) x[i] = static_cast<float>(pixels[i]) * scale - shift;
}

void mlp_forward(const float* params, size_t rows, mlp_buffers& b) {
  dense_forward(params, mlp_layers[0], b.x.data(), rows, b.h1.data());
  relu(b.h1.data(), rows * mlp_layers[0].out);
  dense_forward(params, mlp_layers[1], b.h1.data(), rows, b.h2.data());
  relu(b.h2.data(), rows * mlp_layers[1].out);
  dense_forward(params, mlp_layers[2], b.h2.data(), rows, b.logits.data());
}

// Per row: loss = log(sum_j exp(z_j - m)) + m - z_y with m = max_j z_j, and
// d(mean loss)/dz_j = (softmax(z)_j - [j == y]) / rows.
batch_score softmax_cross_entropy(size_t rows, mlp_buffers& b, bool with_grad) {
  constexpr size_t k = mlp_layers[2].out;
  batch_score score;
  const float inv_rows = rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f;
  for (size_t r = 0; r < rows; ++r) {
    const float* z = b.logits.data() + r * k;
    const size_t label = b.y[r];
    const size_t best = static_cast<size_t>(std::max_element(z, z + k) - z);
    const float m = z[best];
    double sum = 0;
    for (size_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(z[j] - m));
    score.loss_sum += std::log(sum) - static_cast<double>(z[label] - m);
    score.correct += best == label ? 1 : 0;
    if (!with_grad) continue;
    float* dz = b.d3.data() + r * k;
    for (size_t j = 0; j < k; ++j) {
      double p = std::exp(static_cast<double>(z[j] - m)) / sum;
      dz[j] = static_cast<float>(p - (j == label ? 1.0 : 0.0)) * inv_rows;
    }
  }
  return score;
}

void mlp_backward(const float* params, size_t rows, mlp_buffers& b, float* grad,
                  const std::function<void(size_t layer)>& layer_done) {
  const auto done = [&](size_t layer) {
    if (layer_done) layer_done(layer);
  };
  dense_backward(params, mlp_layers[2], b.h2.data(), b.d3.data(), rows, grad, b.d2.data());
  done(2);
  relu_backward(b.h2.data(), b.d2.data(), rows * mlp_layers[1].out);
  dense_backward(params, mlp_layers[1], b.h1.data(), b.d2.data(), rows, grad, b.d1.data());
  done(1);
  relu_backward(b.h1.data(), b.d1.data(), rows * mlp_layers[0].out);
  dense_backward(params, mlp_layers[0], b.x.data(), b.d1.data(), rows, grad, nullptr);
  done(0);
}

}  // namespace troupe::fmnist
