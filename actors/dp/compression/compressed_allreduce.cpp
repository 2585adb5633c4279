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

// What one member sends in each phase over `size` members for pieces of `words` packed words:
// the all_to_all one piece to each other member, the all_gather a ring's n - 1 pieces onward.
wire_figures all_to_all_figures(size_t words, uint32_t size, uint32_t rank,
                                const std::vector<std::string>& hosts) {
  const uint64_t piece = words * sizeof(float);
  wire_figures out{uint64_t{size - 1} * piece, 0};
  if (hosts.size() != size) return out;
  for (uint32_t j = 0; j < size; ++j)
    if (hosts[j] != hosts[rank]) out.bytes_inter_host += piece;
  return out;
}
wire_figures all_gather_figures(size_t words, uint32_t size, uint32_t rank,
                                const std::vector<std::string>& hosts) {
  const uint64_t bytes = uint64_t{size - 1} * words * sizeof(float);
  const bool crosses = hosts.size() == size && hosts[(rank + 1) % size] != hosts[rank];
  return {bytes, crosses ? bytes : 0};
}
wire_figures operator+(wire_figures a, wire_figures b) {
  return {a.bytes + b.bytes, a.bytes_inter_host + b.bytes_inter_host};
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
  return all_to_all_figures(words, n, r, hosts) + all_gather_figures(words, n, r, hosts);
}

shard_range sharded_piece(size_t n, uint32_t size, uint32_t j) {
  const size_t each = size ? n / size : 0;
  return {j * each, j + 1 < size ? each : n - j * each};
}

caf::expected<wire_figures> sharded_reduce(collective& c, std::span<float> data, wire_codec codec,
                                           uint32_t copies, const collective_call& call,
                                           const std::vector<std::string>& hosts,
                                           std::vector<float>& scratch) {
  const uint32_t n = c.size(), r = c.rank();
  if (codec == wire_codec::onebit)
    return make_error(errc::bad_configuration, "a sharded sum does not take 1-bit values");
  copies = std::clamp<uint32_t>(copies, 1, n);
  const size_t each = data.size() / n, even = each * n;
  if (codec == wire_codec::fp32 && copies == 1) {  // in place: the backend's, then the tail
    wire_figures out;
    if (even > 0) {
      if (auto err = c.reduce_scatter(data.first(even), call)) return err;
      out = all_to_all_figures(each, n, r, hosts);
    }
    if (even < data.size()) {
      const auto tail = data.subspan(even);
      if (auto err = c.allreduce(tail, collective_call{call.tag ^ 0x40000000u, call.timeout}))
        return err;
      out.bytes += c.allreduce_bytes(tail.size_bytes());
      out.bytes_inter_host += c.allreduce_bytes_inter_host(tail.size_bytes(), hosts);
    }
    return out;
  }
  if (codec == wire_codec::fp32 && copies == n) {  // every member sums every piece: an allreduce
    if (auto err = c.allreduce(data, call)) return err;
    return wire_figures{c.allreduce_bytes(data.size_bytes()),
                        c.allreduce_bytes_inter_host(data.size_bytes(), hosts)};
  }
  // Packed: member d gets pieces d, d - 1, ... (`copies` of them) of every member, and sums
  // each in rank order, in place.
  const size_t words = kernels::codec_words(codec, data.size() - (n - 1) * each);
  const size_t slot = copies * words;
  scratch.assign(n * slot, 0.0f);
  auto piece = [&](uint32_t j) {
    const auto p = sharded_piece(data.size(), n, j % n);
    return data.subspan(p.begin, p.count);
  };
  auto packed = [&](uint32_t j, uint32_t k) {
    return std::span<float>(scratch).subspan(j * slot + k * words, words);
  };
  for (uint32_t d = 0; d < n; ++d)
    for (uint32_t k = 0; k < copies; ++k)
      kernels::encode_values(codec, piece(d + n - k), {}, packed(d, k));
  if (auto err = c.all_to_all(scratch, call)) return err;
  for (uint32_t k = 0; k < copies; ++k) {
    auto sum = piece(r + n - k);
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (uint32_t j = 0; j < n; ++j) kernels::add_decoded(codec, packed(j, k), sum);
  }
  return all_to_all_figures(slot, n, r, hosts);
}

caf::expected<wire_figures> sharded_gather(collective& c, std::span<float> data,
                                           const collective_call& call,
                                           const std::vector<std::string>& hosts) {
  const uint32_t n = c.size(), r = c.rank();
  const size_t each = data.size() / n, even = each * n;
  wire_figures out;
  if (even > 0) {
    if (auto err = c.all_gather(data.first(even), call)) return err;
    out = all_gather_figures(each, n, r, hosts);
  }
  if (even < data.size()) {  // the tail is the last member's
    const auto tail = data.subspan(even);
    if (auto err = c.broadcast(tail, n - 1, collective_call{call.tag ^ 0x40000000u, call.timeout}))
      return err;
    if (r == n - 1) out.bytes += uint64_t{n - 1} * tail.size_bytes();
  }
  return out;
}

}  // namespace troupe
