// Conversions between fp32 and the 16-bit storage formats (bf16, IEEE fp16). Used by the
// message codec for low-precision tensor payloads and by optimizer state stored in 16 bits.
// Pure functions; round to nearest even (or stochastically, below); NaN stays NaN and overflow
// becomes Inf.
#pragma once

#include <cstdint>
#include <cstring>

namespace troupe::kernels {

inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float bf16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

uint16_t float_to_half(float value);
float half_to_float(uint16_t value);

// Stochastic rounding (finite values): rounds up or down with the probabilities that make the
// result unbiased, E[to_float(round(x))] = x, so that many small increments survive storage.
// `random` supplies the randomness (any well-mixed 64-bit value).
inline uint16_t float_to_bf16_stochastic(float value, uint64_t random) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>((bits + static_cast<uint32_t>(random & 0xffffu)) >> 16);
}
uint16_t float_to_half_stochastic(float value, uint64_t random);

}  // namespace troupe::kernels
