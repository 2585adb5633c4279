#include "apps/fmnist/mlp_math.hpp"

#include <algorithm>
#include <cmath>

#include <cblas.h>

#include "troupe/error.hpp"

namespace troupe::fmnist {
namespace {

// Fashion-MNIST training-set statistics of pixel / 255.
constexpr float pixel_mean = 0.2860f;
constexpr float pixel_std = 0.3530f;

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
                    size_t rows, layer_gradient grad, float* dx) {
  const int m = static_cast<int>(rows);
  const int in = static_cast<int>(l.in);
  const int out = static_cast<int>(l.out);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, m, 1.0f, dy, out, x, in, 0.0f,
              grad.w, in);
  float* db = grad.b;
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

caf::expected<mlp_shape> mlp_shape::of(const std::vector<uint32_t>& hidden) {
  mlp_shape shape;
  uint32_t in = image_size;
  for (size_t i = 0; i <= hidden.size(); ++i) {
    const uint32_t out = i < hidden.size() ? hidden[i] : class_count;
    if (out == 0 || out > max_hidden_width)
      return make_error(errc::bad_configuration, "a hidden layer of " + std::to_string(out) +
                                                     " units (1 to " +
                                                     std::to_string(max_hidden_width) + ")");
    const size_t w = shape.parameter_count;
    shape.layers.push_back(dense_shape{in, out, w, w + size_t{in} * out});
    shape.parameter_count = w + size_t{in} * out + out;
    in = out;
  }
  return shape;
}

mlp_buffers::mlp_buffers(const mlp_shape& shape, size_t rows, bool with_backward)
    : capacity(rows), x(rows * image_size), y(rows) {
  for (const auto& l : shape.layers) {
    out.emplace_back(rows * l.out);
    if (with_backward) d.emplace_back(rows * l.out);
  }
}

void normalize_image(std::span<const uint8_t> pixels, float* x) {
  constexpr float scale = 1.0f / (255.0f * pixel_std);
  constexpr float shift = pixel_mean / pixel_std;
  for (size_t i = 0; i < pixels.size(); ++i) x[i] = static_cast<float>(pixels[i]) * scale - shift;
}

void mlp_forward(const mlp_shape& shape, const float* params, size_t rows, mlp_buffers& b) {
  const float* in = b.x.data();
  for (size_t l = 0; l < shape.layers.size(); ++l) {
    dense_forward(params, shape.layers[l], in, rows, b.out[l].data());
    if (l + 1 < shape.layers.size()) relu(b.out[l].data(), rows * shape.layers[l].out);
    in = b.out[l].data();
  }
}

// Per row: loss = log(sum_j exp(z_j - m)) + m - z_y with m = max_j z_j, and
// d(mean loss)/dz_j = (softmax(z)_j - [j == y]) / rows.
batch_score softmax_cross_entropy(size_t rows, mlp_buffers& b, bool with_grad) {
  constexpr size_t k = class_count;
  batch_score score;
  const float inv_rows = rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f;
  for (size_t r = 0; r < rows; ++r) {
    const float* z = b.logits().data() + r * k;
    const size_t label = b.y[r];
    const size_t best = static_cast<size_t>(std::max_element(z, z + k) - z);
    const float m = z[best];
    double sum = 0;
    for (size_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(z[j] - m));
    score.loss_sum += std::log(sum) - static_cast<double>(z[label] - m);
    score.correct += best == label ? 1 : 0;
    if (!with_grad) continue;
    float* dz = b.d.back().data() + r * k;
    for (size_t j = 0; j < k; ++j) {
      double p = std::exp(static_cast<double>(z[j] - m)) / sum;
      dz[j] = static_cast<float>(p - (j == label ? 1.0 : 0.0)) * inv_rows;
    }
  }
  return score;
}

void mlp_backward(const mlp_shape& shape, const float* params, size_t rows, mlp_buffers& b,
                  float* grad, const std::function<void(size_t layer)>& layer_done) {
  mlp_backward(
      shape, params, rows, b,
      [&](size_t l) {
        return layer_gradient{grad + shape.layers[l].w_offset, grad + shape.layers[l].b_offset};
      },
      layer_done);
}

void mlp_backward(const mlp_shape& shape, const float* params, size_t rows, mlp_buffers& b,
                  const std::function<layer_gradient(size_t layer)>& into,
                  const std::function<void(size_t layer)>& layer_done) {
  for (size_t l = shape.layers.size(); l-- > 0;) {
    const float* in = l > 0 ? b.out[l - 1].data() : b.x.data();
    float* d_in = l > 0 ? b.d[l - 1].data() : nullptr;  // the input's gradient: not the image's
    dense_backward(params, shape.layers[l], in, b.d[l].data(), rows, into(l), d_in);
    if (layer_done) layer_done(l);
    if (l > 0) relu_backward(b.out[l - 1].data(), d_in, rows * shape.layers[l - 1].out);
  }
}

}  // namespace troupe::fmnist
