// The control messages a node's main actor (a server, a worker, a dp trainer) takes from its
// coordinator and from nobody else: stop, crash on purpose (fault injection), its metrics in
// the Prometheus text format, and a new log level. One handler body each, for every such
// actor's behaviour.
#pragma once

#include <memory>
#include <string>

#include <caf/actor_addr.hpp>
#include <caf/result.hpp>

#include "actors/records/job_outcome.hpp"
#include "actors/supervision/node_metrics.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/error.hpp"
#include "troupe/log.hpp"

namespace troupe {

// Ends the job for this node with `failure` ("" when it finished); `self->state.stopping`
// tells its other handlers so. `node` names it in the refusal of another sender.
template <class Self>
caf::result<bool> stop_on_request(Self* self, const caf::actor_addr& coordinator,
                                  const std::string& failure, const char* node) {
  if (!sent_by(self, coordinator))
    return make_error(errc::authentication_failed,
                      std::string{"only the coordinator stops a "} + node);
  self->state.stopping = true;
  self->quit(job_outcome(failure));
  return true;
}

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
