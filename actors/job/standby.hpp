// standby: the actor of a standby coordinator's process (--role coordinator --standby-of
// HOST:PORT). It asks the primary to be followed, keeps the newest coordinator_standing the
// primary sends, and watches the primary: when the primary goes down, or sends nothing for
// --takeover-timeout-ms of time this process was running, it hands the standing to its parent
// (run_standby, which starts the coordinator that takes over) and from then on answers any
// state still coming from the deposed primary with errc::deposed (until its process ends it:
// after the job, or when no member rejoined the takeover). It quits when the primary says the
// job is over. Its parent may also tell it to take over now (--mode hybrid: a standby follows
// both coordinators of the primary's process, and when one is lost so is the other). Accepts
// exit messages only from `supervisor`.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <caf/typed_event_based_actor.hpp>

#include "actors/supervision/failure/heartbeat.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"

namespace troupe {

struct standby_config {
  coordinator_actor primary;
  launch_options opts;
  caf::actor_addr supervisor;
  // Gets (state_atom, the standing, why the primary was judged lost, seconds since it came,
  // this standby's address).
  caf::actor parent;
  logger log;
};

struct standby_state {
  static inline const char* name = "troupe.standby";
  std::optional<wire> latest;                   // the primary's newest standing
  bool latest_training = false;                 // whether it is past placement
  std::chrono::steady_clock::time_point heard;  // when it came
  uint64_t term = 0;                            // the primary's
  heartbeat_monitor silence;
  bool took_over = false;
};

standby_actor::behavior_type standby(standby_actor::stateful_pointer<standby_state> self,
                                     standby_config config);

}  // namespace troupe
