// parameter_bucket: the actor that owns one bucket_store. Pushes are decoded, validated and
// applied in arrival order (one at a time, so no locks); undecodable or mismatched pushes get
// an errc error and count as rejected. Pulls that ssp/bsp must hold back wait here as response
// promises (at most one per worker) and are answered as soon as the clocks allow. Spawned by
// a server actor, its supervisor; `controller` (the coordinator) may retire lost workers.
#pragma once

#include <optional>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/bucket_store.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

struct held_pull {
  caf::typed_response_promise<wire> promise;
  pull_request request;
};

struct bucket_actor_state {
  static inline const char* name = "troupe.bucket";
  std::optional<bucket_store> store;
  codec_limits limits;
  std::vector<held_pull> held;
};

struct bucket_actor_config {
  caf::actor_addr supervisor;  // the server: the only one whose exit messages count
  caf::actor_addr controller;  // the coordinator: the only one who may retire workers
  logger log;
};

bucket_actor::behavior_type parameter_bucket(
    bucket_actor::stateful_pointer<bucket_actor_state> self, bucket_spec spec,
    bucket_actor_config config);

}  // namespace troupe
