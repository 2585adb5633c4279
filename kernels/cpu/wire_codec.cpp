#include "kernels/cpu/wire_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/compression.hpp"
#include "kernels/cpu/half.hpp"

namespace troupe::kernels {

namespace {

// fp16's largest finite value is 65504: values are divided by a power of two that brings the
// largest magnitude to at most 2^14, well inside it (the sum of the members' values is taken
// in fp32 before it is packed again).
float fp16_scale(std::span<const float> in) {
  float largest = 0;
  for (float x : in)
    if (std::isfinite(x)) largest = std::max(largest, std::abs(x));
  if (!(largest > 0)) return 1.0f;
  int exponent = 0;
  std::frexp(largest, &exponent);                          // largest < 2^exponent
  return std::ldexp(1.0f, std::max(exponent - 14, -100));  // a normal float, never 0
}

uint16_t* halves(std::span<float> words) {
  return reinterpret_cast<uint16_t*>(words.data());
}
const uint16_t* halves(std::span<const float> words) {
  return reinterpret_cast<const uint16_t*>(words.data());
}

}  // namespace

const char* to_string(wire_codec c) {
  switch (c) {
    case wire_codec::fp32:
      return "fp32";
    case wire_codec::bf16:
      return "bf16";
    case wire_codec::fp16:
      return "fp16";
    case wire_codec::onebit:
      return "onebit";
  }
  return "fp32";
}

size_t codec_words(wire_codec c, size_t n) {
  switch (c) {
    case wire_codec::fp32:
      return n;
    case wire_codec::bf16:
      return (n + 1) / 2;
    case wire_codec::fp16:
      return 1 + (n + 1) / 2;
    case wire_codec::onebit:
      return (n + onebit_block - 1) / onebit_block + (n + 31) / 32;
  }
  return n;
}

void encode_values(wire_codec c, std::span<const float> in, std::span<float> residual,
                   std::span<float> words) {
  const size_t n = in.size();
  std::fill(words.begin(), words.end(), 0.0f);
  switch (c) {
    case wire_codec::fp32:
      std::copy(in.begin(), in.end(), words.begin());
      return;
    case wire_codec::bf16:
      for (size_t i = 0; i < n; ++i) halves(words)[i] = float_to_bf16(in[i]);
      return;
    case wire_codec::fp16: {
      const float scale = fp16_scale(in);
      words[0] = scale;
      const float inverse = 1.0f / scale;  // a power of two: exact
      for (size_t i = 0; i < n; ++i) halves(words.subspan(1))[i] = float_to_half(in[i] * inverse);
      return;
    }
    case wire_codec::onebit: {
      const size_t blocks = (n + onebit_block - 1) / onebit_block;
      auto* bits = reinterpret_cast<uint8_t*>(words.data() + blocks);
      for (size_t k = 0; k < blocks; ++k) {
        const size_t begin = k * onebit_block, count = std::min(onebit_block, n - begin);
        words[k] = sign_compress(in.subspan(begin, count), residual.subspan(begin, count),
                                 std::span<uint8_t>(bits + begin / 8, sign_bytes(count)));
      }
      return;
    }
  }
}

void decode_values(wire_codec c, std::span<const float> words, std::span<float> out) {
  std::fill(out.begin(), out.end(), 0.0f);
  add_decoded(c, words, out);
}

void add_decoded(wire_codec c, std::span<const float> words, std::span<float> sum) {
  const size_t n = sum.size();
  switch (c) {
    case wire_codec::fp32:
      for (size_t i = 0; i < n; ++i) sum[i] += words[i];
      return;
    case wire_codec::bf16:
      for (size_t i = 0; i < n; ++i) sum[i] += bf16_to_float(halves(words)[i]);
      return;
    case wire_codec::fp16: {
      const float scale = words[0];
      for (size_t i = 0; i < n; ++i) sum[i] += half_to_float(halves(words.subspan(1))[i]) * scale;
      return;
    }
    case wire_codec::onebit: {
      const size_t blocks = (n + onebit_block - 1) / onebit_block;
      const auto* bits = reinterpret_cast<const uint8_t*>(words.data() + blocks);
      for (size_t k = 0; k < blocks; ++k) {
        const size_t begin = k * onebit_block, count = std::min(onebit_block, n - begin);
        sign_add(std::span<const uint8_t>(bits + begin / 8, sign_bytes(count)), words[k],
                 sum.subspan(begin, count));
      }
      return;
    }
  }
}

}  // namespace troupe::kernels
