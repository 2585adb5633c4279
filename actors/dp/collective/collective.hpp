// The collective operations a data-parallel group runs, behind one small interface so that
// the trainer and the allreduce_group do not care which transport moves the bytes: Gloo's TCP
// pairs (gloo_collective), CAF byte messages between the group actors, or NCCL on GPUs. A
// collective object is bound to one membership (rank, size, generation) and is used from one
// thread at a time, the allreduce_group's own. Every call takes a tag (the same on every
// member for the same call) and a timeout, and returns an error value, never throws: a peer
// that is gone or late gives errc::collective_failed or errc::timeout, after which the object
// is spoiled and the group is formed anew.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "troupe/error.hpp"

namespace troupe {

struct collective_call {
  uint32_t tag = 0;
  std::chrono::milliseconds timeout{30000};
};

// Which part of n values member `rank` of `size` holds in a sharded collective: the shards
// are n / size values each, in rank order.
struct shard_range {
  size_t begin = 0;
  size_t count = 0;
};

inline shard_range shard_of(size_t n, uint32_t size, uint32_t rank) {
  const size_t each = size ? n / size : 0;
  return {each * rank, each};
}

// errc::shape_mismatch unless n values split into `size` equal shards.
inline caf::error check_shards(size_t n, uint32_t size) {
  if (size && n % size == 0) return {};
  return make_error(errc::shape_mismatch, std::to_string(n) + " values do not split into " +
                                              std::to_string(size) + " equal shards");
}

class collective {
 public:
  virtual ~collective() = default;

  virtual uint32_t rank() const = 0;
  virtual uint32_t size() const = 0;
  // "gloo", "actors", "nccl": for logs and the console.
  virtual std::string backend() const = 0;

  // Sums `data` over every member, in place.
  virtual caf::error allreduce(std::span<float> data, const collective_call& call) = 0;

  // `data` is size() equal shards (errc::shape_mismatch otherwise). Afterwards this member's
  // shard (shard_of(data.size(), size(), rank())) holds the sum of every member's copy of that
  // shard; the other shards hold unspecified values.
  virtual caf::error reduce_scatter(std::span<float> data, const collective_call& call) = 0;

  // `data` is size() equal shards; afterwards every shard holds what its member had there.
  virtual caf::error all_gather(std::span<float> data, const collective_call& call) = 0;

  // Every member's `data` becomes member `root`'s.
  virtual caf::error broadcast(std::span<float> data, uint32_t root,
                               const collective_call& call) = 0;

  // `data` is size() equal shards; shard j goes to member j, and afterwards shard j holds
  // what member j sent to this one.
  virtual caf::error all_to_all(std::span<float> data, const collective_call& call) = 0;

  // Returns once every member has called it.
  virtual caf::error barrier(const collective_call& call) = 0;

  // Bytes this member sends in an allreduce of `bytes`, in all and to members on other hosts
  // (`hosts`: each rank's host label), for the report. A ring's by default: 2 (n - 1) / n of
  // the buffer, all to the next rank.
  virtual uint64_t allreduce_bytes(uint64_t bytes) const {
    const double n = size();
    return static_cast<uint64_t>(2.0 * (n - 1) / n * double(bytes));
  }
  virtual uint64_t allreduce_bytes_inter_host(uint64_t bytes,
                                              const std::vector<std::string>& hosts) const {
    const uint32_t n = size(), r = rank();
    if (n < 2 || hosts.size() != n || hosts[r] == hosts[(r + 1) % n]) return 0;
    return allreduce_bytes(bytes);
  }
};

}  // namespace troupe
