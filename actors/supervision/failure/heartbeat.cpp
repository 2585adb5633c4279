#include "actors/supervision/failure/heartbeat.hpp"

#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/metrics.hpp"

namespace troupe {

heartbeat_monitor::verdict heartbeat_monitor::expired(clock::time_point now,
                                                      std::chrono::milliseconds timeout) {
  verdict out;
  const auto not_running = awake_.advance(now);
  if (not_running.count() > 0 && !deferred_) {
    out.not_running = not_running;
    deferred_ = true;  // what queued up meanwhile comes first; the next call judges
    return out;
  }
  deferred_ = false;
  for (auto it = last_.begin(); it != last_.end();) {
    if (awake_.reading() - it->second > timeout) {
      out.lost.push_back(it->first);
      it = last_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void log_own_pause(const logger& log, heartbeat_monitor::clock::duration how_long) {
  log.warn(
      "this process was not running for {:.1f} s (stopped, swapped out or starved): members "
      "are judged once what arrived meanwhile is read, and that time is not counted as their "
      "silence",
      std::chrono::duration<double>(how_long).count());
}

}  // namespace troupe
