// parameter_bucket: the actor that owns one bucket_store. Pulls get a consistent snapshot,
// pushes are decoded, validated and applied in arrival order (one at a time, so no locks);
// undecodable or mismatched pushes get an errc error and count as rejected. Spawned by a
// server actor, which is its supervisor.
#pragma once

#include <optional>

#include <caf/typed_event_based_actor.hpp>

#include "actors/bucket_store.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

struct bucket_actor_state {
  static inline const char* name = "troupe.bucket";
  std::optional<bucket_store> store;
  codec_limits limits;
};

bucket_actor::behavior_type parameter_bucket(
    bucket_actor::stateful_pointer<bucket_actor_state> self, bucket_spec spec,
    caf::actor_addr supervisor, logger log);

}  // namespace troupe
