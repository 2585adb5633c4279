// supervisor: restarts the actors it owns when they fail, the Erlang/OTP way (CAF 0.17 has no
// supervisors). Strategies: one_for_one (restart the failed child), one_for_all (restart every
// child), rest_for_one (restart the failed child and those started after it). Children that
// fail more than max_restarts times within `period` make the supervisor give up: it quits
// with errc::job_failed, which its own parent sees (escalation). Restarts wait an
// exponentially growing backoff. A child's start function spawns it with the supervisor's
// address as the only one whose exit messages it accepts (see guards.hpp).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "messages/protocol.hpp"
#include "troupe/log.hpp"
#include "troupe/supervision.hpp"

// Child specs hold functions: they are handed to a supervisor in the same process only.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const troupe::child_spec>)

namespace troupe {

// What supervisor_config::observer must handle: after each restart, (moved, child name, the
// child's new actor), sent by the supervisor.
using restart_observer = caf::typed_actor<caf::reacts_to<moved_atom, std::string, caf::actor>>;

// stats: -> (restarts, escalations: 0 or 1); which: child name -> its current actor (or an
// error when it is not running); host: a new child (same process only) -> its actor, once
// started; restart: internal, the end of a backoff (a generation); inspect: -> a table_view of
// the children (actor, kind, state, restarts), for the console's tree.
using supervisor_actor = caf::typed_actor<
    caf::replies_to<stats_atom>::with<uint64_t, uint64_t>,
    caf::replies_to<which_atom, std::string>::with<caf::actor>,
    caf::replies_to<host_atom, std::shared_ptr<const child_spec>>::with<caf::actor>,
    caf::reacts_to<restart_atom, uint32_t>, caf::replies_to<inspect_atom>::with<wire>>;

struct supervised_child {
  child_spec spec;
  caf::actor handle;  // invalid while stopped or waiting to restart
  uint64_t restarts = 0;
};

struct supervisor_state {
  static inline const char* name = "troupe.supervisor";
  // Shared with the supervisor's exit hook, which stops whatever still runs when it ends.
  std::shared_ptr<std::vector<supervised_child>> running =
      std::make_shared<std::vector<supervised_child>>();
  std::vector<supervised_child>& children() { return *running; }
  const std::vector<supervised_child>& children() const { return *running; }
  std::deque<std::chrono::steady_clock::time_point> recent;  // restarts within the period
  uint64_t restarts = 0;
  bool escalated = false;
  std::vector<uint32_t> pending;  // children waiting for their backoff to end
  uint32_t generation = 0;        // of the pending restart; older delayed messages are stale
};

supervisor_actor::behavior_type supervisor(
    supervisor_actor::stateful_pointer<supervisor_state> self, supervisor_config config,
    std::vector<child_spec> children);

}  // namespace troupe
