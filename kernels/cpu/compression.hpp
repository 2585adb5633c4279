// 1-bit sign compression with error feedback (Seide et al. 2014, "1-Bit Stochastic Gradient
// Descent"; Karimireddy et al. 2019, "Error Feedback Fixes SignSGD"). The sender adds what
// earlier compressions lost, sends one sign bit per value and one scale, and keeps the new
// loss for next time:
//   p = g + e;   scale = mean |p|;   q_i = scale * sign(p_i);   e = p - q
// so that every gradient is eventually applied in full. Bit i of byte i/8 is value i (1: +).
// Pure functions on caller-owned spans; no allocation.
#pragma once

#include <cstdint>
#include <span>

namespace troupe::kernels {

// Bytes needed for `n` sign bits.
inline size_t sign_bytes(size_t n) {
  return (n + 7) / 8;
}

// Compresses grad + residual into `bits` (sign_bytes(n) bytes) and returns the scale;
// `residual` becomes what this compression lost.
float sign_compress(std::span<const float> grad, std::span<float> residual,
                    std::span<uint8_t> bits);

// Expands `bits` into scale * (+1 or -1) per value.
void sign_decompress(std::span<const uint8_t> bits, float scale, std::span<float> out);

// Adds scale * (+1 or -1) per value of `bits` to `sum`.
void sign_add(std::span<const uint8_t> bits, float scale, std::span<float> sum);

}  // namespace troupe::kernels
