// Supervision for an app's own actors, the Erlang/OTP way: a supervisor starts its children
// from their specs and restarts them when they fail, by a strategy (one_for_one, one_for_all,
// rest_for_one) and within a restart intensity (max_restarts in a period; one more and it
// gives up, quitting with errc::job_failed, which its own parent sees). Troupe's nodes
// supervise their buckets and workers with the same actor. Call spawn_supervisor from main()
// or from an actor; ask a supervisor for a child's current handle with child_of.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/expected.hpp>
#include <caf/local_actor.hpp>

#include "troupe/log.hpp"

namespace troupe {

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
  std::string kind = "actor";  // what the console's tree calls it ("learner", "bucket", ...)
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
  // Told (moved, child name, the child's new actor) after each restart; may be null.
  caf::actor observer;
  logger log;
};

// A supervisor of `children` (started in order), not linked to anything. It takes exit
// messages only from its parent, so stop it with caf::anon_send_exit(supervisor,
// caf::exit_reason::kill); however a supervisor ends, its children end with it. Children are
// monitored, not linked: a child that is killed is restarted like one that failed.
caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_config config,
                            std::vector<child_spec> children);

// The same, spawned by and linked to `parent`, whose exit messages it accepts (config.parent
// is set to it): the supervisor ends with its parent, and the parent hears if it gives up.
caf::actor spawn_supervisor(caf::local_actor* parent, supervisor_config config,
                            std::vector<child_spec> children);

// Asks `supervisor` for the running child called `name` and calls `done` with its handle, or
// with an error (errc::job_failed: no such child running; errc::timeout past `timeout`).
// From inside an event-based actor `self`.
void child_of(caf::event_based_actor* self, const caf::actor& supervisor, const std::string& name,
              std::chrono::milliseconds timeout,
              std::function<void(caf::expected<caf::actor>)> done);

}  // namespace troupe
