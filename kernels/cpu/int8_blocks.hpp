// int8 values with one fp32 scale per block of int8_block values (OpenDiLoCo and INTELLECT-1
// send pseudo-gradients so): scale = max |x| / 127 over the block, q = round(x / scale). The
// wire codec stores a tensor this way under dtype::i8 (scales first, then the bytes), and a
// DiLoCo worker keeps what a quantisation lost for its next push (error feedback). Pure
// functions on caller-owned spans; no allocation, safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "troupe/values.hpp"

namespace troupe::kernels {

constexpr size_t int8_block = int8_block_values;

// Blocks of `n` values (the last may be shorter).
inline size_t int8_blocks(size_t n) {
  return (n + int8_block - 1) / int8_block;
}

// Quantises `values` into `q` (n bytes) and `scales` (int8_blocks(n) floats). A block of zeros
// has scale 0. Values must be finite.
void int8_quantize(std::span<const float> values, std::span<int8_t> q, std::span<float> scales);

// q * scale per value, into `out` (n floats).
void int8_dequantize(std::span<const int8_t> q, std::span<const float> scales,
                     std::span<float> out);

// Error feedback: values + residual quantised and dequantised in place into `values` (what the
// receiver will read), `residual` becoming what that lost.
void int8_round_trip(std::span<float> values, std::span<float> residual);

}  // namespace troupe::kernels
