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

std::vector<std::string> heartbeat_monitor::expired(clock::time_point now,
                                                    std::chrono::milliseconds timeout) {
  std::vector<std::string> out;
  for (auto it = last_.begin(); it != last_.end();) {
    if (now - it->second > timeout) {
      out.push_back(it->first);
      it = last_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

}  // namespace troupe
