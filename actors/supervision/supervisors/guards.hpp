// Guards of actors reachable from the network: they accept exit messages only from their
// supervisor, and control messages only from the actor entitled to send them. Both compare the
// sender CAF reports, which keeps out mistakes and stray handles; a peer that forges CAF's wire
// protocol can forge a sender too (docs/SECURITY.md). CAF 0.17 always honours
// exit_reason::kill, whoever sends it.
#pragma once

#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/system_messages.hpp>

#include <functional>

#include "troupe/error.hpp"
#include "troupe/log.hpp"

namespace troupe {

// True when the message being handled came from `expected`.
template <class Self>
bool sent_by(Self* self, const caf::actor_addr& expected) {
  return expected && caf::actor_cast<caf::actor_addr>(self->current_sender()) == expected;
}

// An exit from `supervisor` ends the actor with its reason; one with errc::interrupted (the
// process got Ctrl-C: launch_detail::wait_for) goes to `on_interrupt` instead, when given, so
// that a coordinator ends its job with a report.
template <class Self>
void accept_exits_only_from(Self* self, caf::actor_addr supervisor, logger log,
                            std::function<void(const caf::error&)> on_interrupt = {}) {
  self->set_exit_handler([self, supervisor, log, on_interrupt](caf::exit_msg& msg) {
    if (msg.source == supervisor) {
      if (on_interrupt && has_code(msg.reason, errc::interrupted)) return on_interrupt(msg.reason);
      self->quit(std::move(msg.reason));
      return;
    }
    log.warn("ignored an exit message from {} (not our supervisor)", caf::to_string(msg.source));
  });
}

}  // namespace troupe
