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
#include <functional>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

// Who hears of restarts: after each, (moved, child name, the child's new actor).
using restart_observer = caf::typed_actor<caf::reacts_to<moved_atom, std::string, caf::actor>>;

enum class restart_strategy { one_for_one, one_for_all, rest_for_one };

// permanent: always restarted; transient: restarted only after a failure (not after a normal
// exit); temporary: never restarted.
enum class restart_policy { permanent, transient, temporary };

struct child_spec {
  std::string name;
  // Spawns the child; `supervisor` is the address its exit guard must accept.
  std::function<caf::actor(caf::local_actor* self, caf::actor_addr supervisor)> start;
  restart_policy policy = restart_policy::permanent;
  // Which failures a restart can mend (none given: every failure). A child that ended for
  // another reason is not restarted, as if it were temporary.
  std::function<bool(const caf::error&)> restart_on;
};

struct supervisor_config {
  std::string name = "supervisor";
  restart_strategy strategy = restart_strategy::one_for_one;
  uint32_t max_restarts = 3;  // within `period`; one more escalates
  std::chrono::milliseconds period{5000};
  std::chrono::milliseconds backoff{10};        // before the first restart in a period
  std::chrono::milliseconds max_backoff{1000};  // doubling stops here
  caf::actor_addr parent;                       // whose exit messages the supervisor accepts
  // Quit once no child runs or waits for a restart, with the reason the last one ended with
  // (a node whose only child is its worker ends with it).
  bool quit_when_idle = false;
  restart_observer observer;  // told (moved, child name, new actor) after each restart; may be null
  logger log;
};

}  // namespace troupe

// Child specs hold functions: they are handed to a supervisor in the same process only.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const troupe::child_spec>)

namespace troupe {

// stats: -> (restarts, escalations: 0 or 1); which: child name -> its current actor (or an
// error when it is not running); host: a new child (same process only) -> its actor, once
// started; restart: internal, the end of a backoff (a generation).
using supervisor_actor = caf::typed_actor<
    caf::replies_to<stats_atom>::with<uint64_t, uint64_t>,
    caf::replies_to<which_atom, std::string>::with<caf::actor>,
    caf::replies_to<host_atom, std::shared_ptr<const child_spec>>::with<caf::actor>,
    caf::reacts_to<restart_atom, uint32_t>>;

struct supervised_child {
  child_spec spec;
  caf::actor handle;  // invalid while stopped or waiting to restart
};

struct supervisor_state {
  static inline const char* name = "troupe.supervisor";
  std::vector<supervised_child> children;
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
