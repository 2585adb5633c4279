// Test helpers for the collective backends: N members as threads of one process, each with
// its own group made by `make` over one memory_store; the test's checks run on the test's
// thread after every member has returned. Used by tests/unit/collective_test.cpp (gloo,
// actors), tests/unit/state_agreement_test.cpp and tests/gpu/nccl_collective_test.cpp (nccl).
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <csignal>

#include <caf/actor_system.hpp>

#include "actors/dp/collective/collective.hpp"
#include "actors/dp/collective/rendezvous_store.hpp"
#include "tests/support/sigpipe.hpp"
#include "troupe/node.hpp"

namespace troupe::testing {

// The actor system the `actors` backend's members share (one per test process).
inline caf::actor_system& collective_test_system() {
  static caf::actor_system_config cfg = [] {
    caf::actor_system_config c;
    troupe::configure_actor_system(c, launch_options{});
    return c;
  }();
  static caf::actor_system sys{cfg};
  return sys;
}

using rank_body = std::function<void(collective&, uint32_t rank)>;
using member_maker = std::function<caf::expected<std::unique_ptr<collective>>(
    rendezvous_store&, uint32_t rank, uint32_t size)>;

// Runs `body` on `size` members; returns why members could not join, one line each.
inline std::vector<std::string> run_ranks(uint32_t size, const member_maker& make,
                                          const rank_body& body) {
  memory_store store;
  std::vector<std::string> failures(size);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      auto group = make(store, r, size);
      if (!group) {
        failures[r] = describe(group.error());
        return;
      }
      body(**group, r);
    });
  for (auto& t : threads) t.join();
  std::vector<std::string> out;
  for (auto& f : failures)
    if (!f.empty()) out.push_back(f);
  return out;
}

// Member r's value at index i: distinct per member, so that a sum that drops one shows.
inline float value_of(uint32_t r, size_t i) {
  return float((i * 7 + r * 13) % 101) - 50.0f + 0.25f * float(r);
}

}  // namespace troupe::testing
