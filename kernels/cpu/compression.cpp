#include "kernels/cpu/compression.hpp"

#include <array>
#include <cmath>

namespace troupe::kernels {

namespace {

// Eight lanes of +1 / -1 for each byte of sign bits (bit j: value j), so that expanding a
// byte is one vector multiply-add instead of eight bit tests.
using sign_lanes = std::array<std::array<float, 8>, 256>;

sign_lanes make_sign_lanes() {
  sign_lanes out{};
  for (unsigned b = 0; b < 256; ++b)
    for (unsigned j = 0; j < 8; ++j) out[b][j] = (b >> j) & 1u ? 1.0f : -1.0f;
  return out;
}

const sign_lanes& lanes() {
  static const sign_lanes table = make_sign_lanes();  // a constant, built once
  return table;
}

// Sum of |p| in eight running sums, in a fixed order (the compiler may keep them in a vector).
float abs_sum(std::span<const float> p) {
  float lanes8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= p.size(); i += 8)
    for (size_t j = 0; j < 8; ++j) lanes8[j] += std::abs(p[i + j]);
  double total = 0;
  for (float x : lanes8) total += x;
  for (; i < p.size(); ++i) total += std::abs(p[i]);
  return static_cast<float>(total);
}

}  // namespace

float sign_compress(std::span<const float> grad, std::span<float> residual,
                    std::span<uint8_t> bits) {
  const size_t n = grad.size();
  if (n == 0) return 0.0f;
  for (size_t i = 0; i < n; ++i)
    residual[i] += grad[i];  // p = g + e, kept in place until e is known
  const float scale = abs_sum(residual.first(n)) / static_cast<float>(n);
  const size_t whole = n / 8;
  for (size_t b = 0; b < whole; ++b) {  // eight values per byte, without branches
    float* p = residual.data() + 8 * b;
    unsigned byte = 0;
    for (unsigned j = 0; j < 8; ++j) {
      const unsigned positive = p[j] >= 0.0f ? 1u : 0u;
      byte |= positive << j;
      p[j] -= scale * (2.0f * static_cast<float>(positive) - 1.0f);  // e = p - q
    }
    bits[b] = static_cast<uint8_t>(byte);
  }
  if (whole < sign_bytes(n)) {
    unsigned byte = 0;
    for (size_t i = 8 * whole; i < n; ++i) {
      const bool positive = residual[i] >= 0.0f;
      byte |= (positive ? 1u : 0u) << (i - 8 * whole);
      residual[i] -= positive ? scale : -scale;
    }
    bits[whole] = static_cast<uint8_t>(byte);
  }
  return scale;
}

void sign_add(std::span<const uint8_t> bits, float scale, std::span<float> sum) {
  const auto& table = lanes();
  const size_t n = sum.size(), whole = n / 8;
  for (size_t b = 0; b < whole; ++b) {
    const auto& lane = table[bits[b]];
    float* out = sum.data() + 8 * b;
    for (size_t j = 0; j < 8; ++j) out[j] += scale * lane[j];
  }
  for (size_t i = 8 * whole; i < n; ++i) sum[i] += (bits[i / 8] >> (i % 8)) & 1u ? scale : -scale;
}

void sign_decompress(std::span<const uint8_t> bits, float scale, std::span<float> out) {
  for (float& x : out) x = 0.0f;
  sign_add(bits, scale, out);
}

}  // namespace troupe::kernels
