// Actors reachable from the network accept exit messages only from their supervisor: any peer
// holding a handle can send one (docs/SECURITY.md). CAF 0.17 always honours exit_reason::kill,
// whoever sends it; every other reason from anyone else is logged and ignored.
#pragma once

#include <caf/actor_addr.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/system_messages.hpp>

#include "troupe/log.hpp"

namespace troupe {

template <class Self>
void accept_exits_only_from(Self* self, caf::actor_addr supervisor, logger log) {
  self->set_exit_handler([self, supervisor, log](caf::exit_msg& msg) {
    if (msg.source == supervisor) {
      self->quit(std::move(msg.reason));
      return;
    }
    log.warn("ignored an exit message from {} (not our supervisor)", caf::to_string(msg.source));
  });
}

}  // namespace troupe
