// The sum over a data-parallel group of values packed by a kernels::wire_codec (bf16, fp16,
// 1-bit), as 1-bit Adam's compressed allreduce does it, in two phases over the backend's
// all_to_all and all_gather: every member packs chunk j of its values for member j; each
// member unpacks the chunks it received, sums them in fp32 (adding its own error for its
// chunk under 1-bit) and packs the sum again; all_gather hands every member every packed sum,
// which all unpack alike, so the members end with the same bits. Each member sends
// 2 (n - 1) packed chunks of ceil(values / n) values. Called on the allreduce_group's thread.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/dp/collective/collective.hpp"
#include "kernels/cpu/wire_codec.hpp"

namespace troupe {

// Error feedback of a 1-bit sum (empty spans for the other codecs): the member's error for
// every value it sends, and its error as owner of its chunk (compressed_chunk values).
struct error_feedback {
  std::span<float> worker;
  std::span<float> server;
};

// Values member rank owns in a compressed sum of n values over `size` members.
inline size_t compressed_chunk(size_t n, uint32_t size) {
  return size ? (n + size - 1) / size : n;
}

struct wire_figures {
  uint64_t bytes = 0;             // this member sent
  uint64_t bytes_inter_host = 0;  // of those, to members on other hosts (`hosts` per rank)
};

// Bytes one member sends in a compressed sum of n values over `size` members.
uint64_t compressed_sum_bytes(kernels::wire_codec codec, size_t n, uint32_t size);

// Sums `data` over the members of `c`, packed by `codec`; `scratch` is the caller's to reuse.
// The call's tag is used for the all_to_all and tag ^ 0x40000000 for the all_gather.
caf::expected<wire_figures> compressed_allreduce(collective& c, std::span<float> data,
                                                 kernels::wire_codec codec, error_feedback errors,
                                                 const collective_call& call,
                                                 const std::vector<std::string>& hosts,
                                                 std::vector<float>& scratch);

// ZeRO's two halves of an allreduce (--zero-stage 1), in place over `data` cut into size()
// pieces (sharded_piece: n / size values each, the last also the rest), piece r being member
// r's. sharded_reduce: member r's pieces r, r - 1, ... (`copies` of them, around the ring: its
// own and its backups') of `data` become the sums of every member's (the other pieces are left
// unspecified), summed in rank order in fp32, so that every member that sums a piece gets the
// same bits; the pieces travel packed by `codec` (fp32, bf16 or fp16); in fp32, one copy is the
// backend's reduce-scatter and n copies its allreduce, in place. sharded_gather: every
// member's piece r of `data` becomes member r's, exact. Each sends (n - 1) x `copies` pieces,
// then (n - 1): with one copy, an allreduce's bytes over the two.
shard_range sharded_piece(size_t n, uint32_t size, uint32_t j);
caf::expected<wire_figures> sharded_reduce(collective& c, std::span<float> data,
                                           kernels::wire_codec codec, uint32_t copies,
                                           const collective_call& call,
                                           const std::vector<std::string>& hosts,
                                           std::vector<float>& scratch);
caf::expected<wire_figures> sharded_gather(collective& c, std::span<float> data,
                                           const collective_call& call,
                                           const std::vector<std::string>& hosts);

}  // namespace troupe
