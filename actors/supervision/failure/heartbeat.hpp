// Failure detection by heartbeats, not TCP time-outs: every server and worker process runs a
// coordinator watch (coordinator_watch.hpp) that tells the coordinator "still here" every
// --heartbeat-ms, and the coordinator's heartbeat_monitor names the nodes it has not heard from
// for --heartbeat-timeout-ms (a process that hangs or is stopped keeps its TCP connection open,
// so no down message would ever come). Nodes in the coordinator's own process send none and
// are never timed out. A standby watches its primary, and a watch its coordinator, the same way.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/supervision/failure/awake_clock.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

// When each node was last heard from, on the watcher's awake clock (awake_clock.hpp). Owned by
// one actor (the coordinator, the dp coordinator), which calls expired() every `interval`.
//
// Silence is measured only over time the watcher ran: each call counts at most two intervals.
// And a call that comes late (the watcher was stopped, swapped out, or its tick waited behind
// a full mailbox) judges nobody: it returns at once, the owner reads what queued up meanwhile
// (heartbeats included), and the next call judges.
class heartbeat_monitor {
 public:
  using clock = std::chrono::steady_clock;

  explicit heartbeat_monitor(std::chrono::milliseconds interval = std::chrono::milliseconds{500})
      : awake_(2 * interval) {}

  void heard(const std::string& name, clock::time_point now) {
    if (!awake_.started()) awake_.advance(now);  // the first heartbeat starts the clock
    last_[name] = awake_.at(now);
  }
  void forget(const std::string& name) { last_.erase(name); }

  struct verdict {
    std::vector<std::string> lost;  // silent for longer than the timeout (now forgotten)
    clock::duration not_running{};  // how long the watcher itself was not (0 when on time)
  };
  // Judges every node: those silent for longer than `timeout` of awake time are lost, unless
  // this call found that the watcher itself had not been running.
  verdict expired(clock::time_point now, std::chrono::milliseconds timeout);
  // A tick that judges nobody (a takeover waits for its members): the awake clock goes on,
  // so that the first judging tick after it is not taken for a pause of this process.
  void keep_time(clock::time_point now) {
    if (awake_.started()) awake_.advance(now);
  }

 private:
  awake_clock awake_;
  bool deferred_ = false;                        // the last call judged nobody
  std::map<std::string, clock::duration> last_;  // awake clock at the last heartbeat
};

// Says that the watcher was not running for `how_long` and that members are not judged for it.
void log_own_pause(const logger& log, heartbeat_monitor::clock::duration how_long);

}  // namespace troupe
