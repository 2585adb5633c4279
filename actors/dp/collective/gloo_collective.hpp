// The `gloo` backend: Gloo's TCP transport and algorithms (Debian libgloo-dev, the library
// PyTorch's CPU backend is built on). make_gloo_collective binds a TCP device to `bind_host`,
// publishes its address in the rendezvous store under `prefix` (one prefix per group
// generation) and connects to every other member (a full mesh), waiting at most `timeout`.
// Gloo reports errors by throwing; nothing thrown leaves this backend: every call returns an
// error value. Used from one thread at a time (the allreduce_group's).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <caf/expected.hpp>

#include "actors/dp/collective/collective.hpp"
#include "actors/dp/collective/rendezvous_store.hpp"

namespace troupe {

struct gloo_options {
  uint32_t rank = 0;
  uint32_t size = 1;
  std::string bind_host = "127.0.0.1";  // the address the other members connect to
  std::string prefix;                   // the store's keys of this generation
  std::chrono::milliseconds timeout{30000};
};

caf::expected<std::unique_ptr<collective>> make_gloo_collective(rendezvous_store& store,
                                                                const gloo_options& options);

}  // namespace troupe
