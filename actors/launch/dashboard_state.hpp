// The coordinator's side of the web dashboard (troupe/dashboard.hpp): the job's state as the
// page reads it, {"mode", "at_unix_ms", "views": {name: {"columns", "rows"}}, "errors":
// {name: why}}, from the coordinator's own views (those of the console: nodes, tree, workers,
// buckets, curve, group, timeline; a job shows those its mode has), each asked with a bound.
// start_dashboard serves it under --dashboard-port. From the launcher's thread (not an actor).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "messages/protocol.hpp"
#include "troupe/dashboard.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"

namespace troupe {

std::string dashboard_state(caf::actor_system& sys, const coordinator_actor& coordinator,
                            const std::string& mode, std::chrono::milliseconds bound);

// The dashboard of `coordinator` on --listen's host at --dashboard-port (under --tls-dir:
// HTTPS); nullptr when the flag is not given. Says where it serves in the log.
caf::expected<std::unique_ptr<dashboard_endpoint>> start_dashboard(
    caf::actor_system& sys, const launch_options& opts, const coordinator_actor& coordinator,
    const logger& log);

}  // namespace troupe
