// The `actors` backend: collectives over CAF byte messages between the members' processes,
// needing nothing but CAF's own connections. Each member publishes an inbox actor (on
// `bind_host`, any free port) and puts its address in the rendezvous store; the others
// connect to it directly (so chunks do not travel through the coordinator's node). An
// allreduce is a ring reduce-scatter and a ring all-gather, in chunks of at most 1 MiB sent
// ahead (the inbox's queue holds at most 256 MiB, beyond that the call fails); each shard is
// summed on one member in a fixed order and copied to the others, so every member gets the
// same bits. A chunk is a small Cap'n Proto header beside the values' raw fp32 bytes, which
// are copied once into the message and once out of it, never re-encoded. Chunks carry the
// generation and its group key, which only members learn (from their start, over the
// authenticated connection): the inbox drops anything else. Used from one thread at a time
// (the allreduce_group's); it blocks that thread, never a CAF one.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "actors/dp/collective/collective.hpp"
#include "actors/dp/collective/rendezvous_store.hpp"

namespace troupe {

struct actor_collective_options {
  uint32_t rank = 0;
  uint32_t size = 1;
  uint64_t generation = 0;
  uint64_t key = 0;                     // the generation's group key
  std::string bind_host = "127.0.0.1";  // where the inbox listens
  std::string prefix;                   // the store's keys of this group
  std::chrono::milliseconds timeout{30000};
};

caf::expected<std::unique_ptr<collective>> make_actor_collective(
    caf::actor_system& sys, rendezvous_store& store, const actor_collective_options& options);

}  // namespace troupe
