// Failure detection by heartbeats, not TCP time-outs: every server and worker process runs a
// heartbeat actor that tells the coordinator "still here" every --heartbeat-ms, and the
// coordinator's heartbeat_monitor names the nodes it has not heard from for
// --heartbeat-timeout-ms (a process that hangs or is stopped keeps its TCP connection open,
// so no down message would ever come). Nodes in the coordinator's own process send none and
// are never timed out.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

using heartbeat_actor = caf::typed_actor<caf::reacts_to<tick_atom>>;

struct heartbeat_config {
  coordinator_actor coordinator;
  std::string name;  // the node's name, as it joined
  std::chrono::milliseconds interval{500};
  caf::actor_addr supervisor;
  logger log;
};

struct heartbeat_state {
  static inline const char* name = "troupe.heartbeat";
  uint64_t sequence = 0;
};

heartbeat_actor::behavior_type heartbeat_sender(
    heartbeat_actor::stateful_pointer<heartbeat_state> self, heartbeat_config config);

// When each node was last heard from. Owned by the coordinator; not thread-safe.
class heartbeat_monitor {
 public:
  using clock = std::chrono::steady_clock;

  void heard(const std::string& name, clock::time_point now) { last_[name] = now; }
  void forget(const std::string& name) { last_.erase(name); }

  // Nodes silent for longer than `timeout` (each named once: they are forgotten).
  std::vector<std::string> expired(clock::time_point now, std::chrono::milliseconds timeout);

 private:
  std::map<std::string, clock::time_point> last_;
};

}  // namespace troupe
