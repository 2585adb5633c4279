#include "kernels/cpu/int8_blocks.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::kernels {

namespace {

float block_scale(std::span<const float> block) {
  float most = 0.0f;
  for (float x : block) most = std::max(most, std::fabs(x));
  return most / 127.0f;
}

int8_t quantized(float x, float scale) {
  if (scale == 0.0f) return 0;
  return static_cast<int8_t>(std::clamp(std::nearbyint(x / scale), -127.0f, 127.0f));
}

}  // namespace

void int8_quantize(std::span<const float> values, std::span<int8_t> q, std::span<float> scales) {
  for (size_t b = 0; b < int8_blocks(values.size()); ++b) {
    const size_t first = b * int8_block;
    const auto block = values.subspan(first, std::min(int8_block, values.size() - first));
    scales[b] = block_scale(block);
    for (size_t i = 0; i < block.size(); ++i) q[first + i] = quantized(block[i], scales[b]);
  }
}

void int8_dequantize(std::span<const int8_t> q, std::span<const float> scales,
                     std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(q[i]) * scales[i / int8_block];
}

void int8_round_trip(std::span<float> values, std::span<float> residual) {
  for (size_t first = 0; first < values.size(); first += int8_block) {
    const size_t n = std::min(int8_block, values.size() - first);
    const auto block = values.subspan(first, n);
    const auto lost = residual.subspan(first, n);
    for (size_t i = 0; i < n; ++i) block[i] += lost[i];
    const float scale = block_scale(block);
    for (size_t i = 0; i < n; ++i) {
      const float sent = float(quantized(block[i], scale)) * scale;
      lost[i] = block[i] - sent;
      block[i] = sent;
    }
  }
}

}  // namespace troupe::kernels
