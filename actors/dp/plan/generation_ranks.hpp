// How a new generation of a data-parallel group is ranked, for the dp coordinator and a loop
// group alike: the live members in join order get ranks 0..n-1 and a fresh token each, and
// every start carries what the members share (the size, the generation, the group's key and
// each rank's host). The caller fills in the rest of each start and sends it. Header-only:
// the two member types differ, their fields do not.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "actors/dp/collective/generation_store.hpp"
#include "messages/types.hpp"

namespace troupe {

// The host label of each live member, in rank order.
template <class Member, class Live>
std::vector<std::string> live_hosts(const std::vector<Member>& members, Live live) {
  std::vector<std::string> hosts;
  for (const auto& m : members)
    if (live(m)) hosts.push_back(m.host);
  return hosts;
}

// Ranks the live members of generation `generation` and gives each its start's shared part.
template <class Member, class Live>
std::vector<std::pair<Member*, group_start>> rank_generation(std::vector<Member>& members,
                                                             Live live, uint64_t generation) {
  const auto hosts = live_hosts(members, live);
  const uint64_t key = random_token();
  std::vector<std::pair<Member*, group_start>> starts;
  for (auto& m : members) {
    if (!live(m)) continue;
    m.rank = static_cast<uint32_t>(starts.size());
    m.token = random_token();
    group_start start;
    start.rank = m.rank;
    start.size = static_cast<uint32_t>(hosts.size());
    start.generation = generation;
    start.token = m.token;
    start.group_key = key;
    start.hosts = hosts;
    starts.emplace_back(&m, std::move(start));
  }
  return starts;
}

}  // namespace troupe
