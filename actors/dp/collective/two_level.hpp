// Two-level reduction as a collective of its own: an allreduce is a reduce-scatter among the
// members of one host, an allreduce of each shard among the members with the same local rank
// on the other hosts (every local rank talks across hosts, as Horovod does, not one leader),
// and an all-gather inside the host. The other operations go to the flat group. Built by
// the allreduce_group from three groups of the same generation; every host must have the
// same number of members. Used from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/dp/collective/collective.hpp"

namespace troupe {

// Where member `rank` sits when members are grouped by `hosts` (one label per rank).
struct host_layout {
  uint32_t host = 0;        // index of its host, in order of first appearance
  uint32_t hosts = 0;       // how many hosts
  uint32_t local_rank = 0;  // its place among its host's members (by rank)
  uint32_t local_size = 0;  // members on its host
  bool uniform = false;     // every host has local_size members
};

host_layout layout_of(const std::vector<std::string>& hosts, uint32_t rank);

// Whether two-level reduction applies to `hosts`: more than one host, more than one member
// on each, the same number on every one.
bool two_level_fits(const std::vector<std::string>& hosts);

class two_level_collective : public collective {
 public:
  two_level_collective(std::unique_ptr<collective> flat, std::unique_ptr<collective> local,
                       std::unique_ptr<collective> cross);

  uint32_t rank() const override { return flat_->rank(); }
  uint32_t size() const override { return flat_->size(); }
  std::string backend() const override;

  caf::error allreduce(std::span<float> data, const collective_call& call) override;
  caf::error reduce_scatter(std::span<float> d, const collective_call& c) override {
    return flat_->reduce_scatter(d, c);
  }
  caf::error all_gather(std::span<float> d, const collective_call& c) override {
    return flat_->all_gather(d, c);
  }
  caf::error broadcast(std::span<float> d, uint32_t root, const collective_call& c) override {
    return flat_->broadcast(d, root, c);
  }
  caf::error all_to_all(std::span<float> d, const collective_call& c) override {
    return flat_->all_to_all(d, c);
  }
  caf::error barrier(const collective_call& c) override { return flat_->barrier(c); }

  // Inside the host: a ring over the local members; across: each local rank's shard.
  uint64_t allreduce_bytes(uint64_t bytes) const override;
  uint64_t allreduce_bytes_inter_host(uint64_t bytes,
                                      const std::vector<std::string>& hosts) const override;

 private:
  std::unique_ptr<collective> flat_, local_, cross_;
  std::vector<float> padded_;
};

}  // namespace troupe
