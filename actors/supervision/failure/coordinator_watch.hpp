// coordinator_watch: the one actor of a server or worker process that watches the coordinator.
// It sends the process's heartbeat every --heartbeat-ms. With a standby listed (--coordinator
// A,B), it also looks for a takeover: when the coordinator goes down, or answers no heartbeat
// for --takeover-timeout-ms of time this process was running, it connects to the next address
// of the list (the handshake, by a detached helper), asks that coordinator's term, switches
// the process's coordinator_link to it when the term is newer, and tells the link's members to
// rejoin it. When no coordinator answers within --join-timeout, the members are told to stop.
// Spawned by the launcher (actors/launch/launch.cpp) after the members; accepts exit messages only
// from `supervisor`.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <caf/typed_event_based_actor.hpp>

#include "actors/supervision/failure/coordinator_link.hpp"
#include "actors/supervision/failure/heartbeat.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"

namespace troupe {

//   tick: internal, the next heartbeat (and the check on the coordinator's answers)
using coordinator_watch_actor = caf::typed_actor<caf::reacts_to<tick_atom>>;

struct coordinator_watch_config {
  coordinator_link_ptr coordinator;
  std::string name;  // the node's name, as it joined
  role sender = role::worker;
  launch_options opts;  // the heartbeat interval, the coordinators, the secret, the timeouts
  host_port joined;     // where the coordinator we joined is
  caf::actor_addr supervisor;
  logger log;
};

struct coordinator_watch_state {
  static inline const char* name = "troupe.coordinator_watch";
  uint64_t sequence = 0;
  heartbeat_monitor answers;  // when the coordinator last answered a heartbeat
  bool looking = false;       // a takeover is being looked for
  // When the coordinator was lost, while no newer one has been found (the bound on looking).
  std::optional<std::chrono::steady_clock::time_point> lost_since;
  host_port at;  // where the current coordinator is
};

coordinator_watch_actor::behavior_type coordinator_watch(
    coordinator_watch_actor::stateful_pointer<coordinator_watch_state> self,
    coordinator_watch_config config);

}  // namespace troupe
