#include "kernels/cpu/compression.hpp"

#include <cmath>

namespace troupe::kernels {

float sign_compress(std::span<const float> grad, std::span<float> residual,
                    std::span<uint8_t> bits) {
  const size_t n = grad.size();
  if (n == 0) return 0.0f;
  double abs_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    residual[i] += grad[i];  // p = g + e, kept in place until e is known
    abs_sum += std::abs(residual[i]);
  }
  const float scale = static_cast<float>(abs_sum / static_cast<double>(n));
  for (size_t b = 0; b < sign_bytes(n); ++b) bits[b] = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool positive = residual[i] >= 0.0f;
    if (positive) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    residual[i] -= positive ? scale : -scale;  // e = p - q
  }
  return scale;
}

void sign_decompress(std::span<const uint8_t> bits, float scale, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = (bits[i / 8] >> (i % 8)) & 1u ? scale : -scale;
}

}  // namespace troupe::kernels
