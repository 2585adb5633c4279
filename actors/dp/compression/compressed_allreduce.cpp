#include "actors/dp/compression/compressed_allreduce.hpp"

#include <algorithm>

namespace troupe {

using kernels::wire_codec;

uint64_t compressed_sum_bytes(wire_codec codec, size_t n, uint32_t size) {
  if (size < 2) return 0;
  const uint64_t words = kernels::codec_words(codec, compressed_chunk(n, size));
  return 2 * uint64_t{size - 1} * words * sizeof(float);
}

namespace {

wire_figures figures_of(wire_codec codec, size_t n, uint32_t size, uint32_t rank,
                        const std::vector<std::string>& hosts) {
  wire_figures out{compressed_sum_bytes(codec, n, size), 0};
  if (size < 2 || hosts.size() != size) return out;
  const uint64_t shard = kernels::codec_words(codec, compressed_chunk(n, size)) * sizeof(float);
  for (uint32_t j = 0; j < size; ++j)  // all_to_all: one shard to each other member
    if (hosts[j] != hosts[rank]) out.bytes_inter_host += shard;
  if (hosts[(rank + 1) % size] != hosts[rank])  // all_gather: a ring's n - 1 shards onward
    out.bytes_inter_host += uint64_t{size - 1} * shard;
  return out;
}

}  // namespace

caf::expected<wire_figures> compressed_allreduce(collective& c, std::span<float> data,
                                                 wire_codec codec, error_feedback errors,
                                                 const collective_call& call,
                                                 const std::vector<std::string>& hosts,
                                                 std::vector<float>& scratch) {
  const uint32_t n = c.size(), r = c.rank();
  const size_t chunk = compressed_chunk(data.size(), n);
  const size_t words = kernels::codec_words(codec, chunk);
  const bool feedback = codec == wire_codec::onebit;
  if (feedback && (errors.worker.size() < data.size() || errors.server.size() < chunk))
    return make_error(errc::shape_mismatch, "1-bit sum: error buffers do not fit the values");
  auto piece = [&](std::span<float> values, uint32_t j) {
    const size_t begin = std::min(values.size(), j * chunk);
    return values.subspan(begin, std::min(chunk, values.size() - begin));
  };
  scratch.assign(n * words + chunk, 0.0f);
  auto packed = std::span<float>(scratch).first(n * words);
  auto sum = std::span<float>(scratch).subspan(n * words, chunk);
  for (uint32_t j = 0; j < n; ++j)
    kernels::encode_values(codec, piece(data, j),
                           feedback ? piece(errors.worker, j) : std::span<float>{},
                           packed.subspan(j * words, words));
  if (auto err = c.all_to_all(packed, call)) return err;
  auto own = piece(data, r);
  auto own_sum = sum.first(own.size());
  for (uint32_t j = 0; j < n; ++j)
    kernels::add_decoded(codec, packed.subspan(j * words, words), own_sum);
  kernels::encode_values(codec, own_sum,
                         feedback ? errors.server.first(own.size()) : std::span<float>{},
                         packed.subspan(r * words, words));
  if (auto err = c.all_gather(packed, collective_call{call.tag ^ 0x40000000u, call.timeout}))
    return err;
  for (uint32_t j = 0; j < n; ++j)
    kernels::decode_values(codec, packed.subspan(j * words, words), piece(data, j));
  return figures_of(codec, data.size(), n, r, hosts);
}

}  // namespace troupe
