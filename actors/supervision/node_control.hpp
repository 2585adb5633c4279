// The control messages a node's main actor (a server, a worker) takes from its coordinator and
// from nobody else: crash on purpose (fault injection), its metrics in the Prometheus text
// format, and a new log level. One handler body each, for both actors' behaviours.
#pragma once

#include <memory>
#include <string>

#include <caf/actor_addr.hpp>
#include <caf/result.hpp>

#include "actors/supervision/guards.hpp"
#include "actors/supervision/node_metrics.hpp"
#include "troupe/error.hpp"
#include "troupe/log.hpp"

namespace troupe {

template <class Self>
void crash_on_purpose(Self* self, const caf::actor_addr& coordinator, const std::string& name,
                      const logger& log) {
  if (!sent_by(self, coordinator)) return;
  log.warn("crashing on purpose (fault injection)");
  self->quit(make_error(errc::injected_fault, name));
}

template <class Self>
caf::result<std::string> metrics_for(Self* self, const caf::actor_addr& coordinator,
                                     const std::shared_ptr<metrics_registry>& metrics) {
  if (!sent_by(self, coordinator))
    return make_error(errc::authentication_failed, "only the coordinator reads metrics");
  return node_metrics_text(metrics);
}

template <class Self>
void set_level_from(Self* self, const caf::actor_addr& coordinator, const std::string& level,
                    const logger& log) {
  log_level to;
  if (sent_by(self, coordinator) && parse_log_level(level, to)) log.set_level(to);
}

}  // namespace troupe
