#include "actors/supervision/heartbeat.hpp"

#include "actors/supervision/guards.hpp"
#include "troupe/metrics.hpp"

namespace troupe {

heartbeat_actor::behavior_type heartbeat_sender(
    heartbeat_actor::stateful_pointer<heartbeat_state> self, heartbeat_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  self->send(self, tick_atom_v);
  return {
      [=](tick_atom) {
        const auto now = std::chrono::system_clock::now().time_since_epoch();
        const auto usage = current_process_usage();
        const heartbeat beat{
            config.name, ++self->state.sequence,
            static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::milliseconds>(now).count()),
            usage.cpu_seconds, usage.rss_bytes};
        self->send(config.coordinator, heartbeat_atom_v, encode(beat));
        self->delayed_send(self, config.interval, tick_atom_v);
      },
  };
}

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
