// How a data-parallel group packs a run of fp32 values into 32-bit words for the wire when
// it allreduces them compressed (actors/dp/compression/compressed_allreduce.hpp): unchanged (fp32),
// as bf16 pairs, as fp16 pairs after one power-of-two scale word (so that no value overflows fp16's
// 65504), or as one sign bit per value and one scale word per block of onebit_block values (1-bit,
// with error feedback: kernels/cpu/compression.hpp; a scale per block rather than per message keeps
// small tensors' signs from taking large tensors' scale, for 1.125 bits per value). Words are plain
// bits: the collective moves them without arithmetic. Pure functions on caller-owned spans; no
// allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace troupe::kernels {

enum class wire_codec : uint8_t { fp32, bf16, fp16, onebit };

constexpr size_t onebit_block = 256;  // values per scale of the 1-bit codec (32 bytes of signs)

// "fp32", "bf16", "fp16", "onebit".
const char* to_string(wire_codec c);

// 32-bit words that `n` values take in codec `c`.
size_t codec_words(wire_codec c, size_t n);

// Packs `in` into `words` (codec_words(c, in.size()) of them). For onebit, `residual` (as
// long as `in`) holds what earlier compressions lost: it is added before compressing and then
// becomes what this one lost; the other codecs ignore it (it may be empty).
void encode_values(wire_codec c, std::span<const float> in, std::span<float> residual,
                   std::span<float> words);

// Unpacks `words` into `out` (out.size() values), as encode_values packed them.
void decode_values(wire_codec c, std::span<const float> words, std::span<float> out);

// Adds the unpacked `words` to `sum`.
void add_decoded(wire_codec c, std::span<const float> words, std::span<float> sum);

}  // namespace troupe::kernels
