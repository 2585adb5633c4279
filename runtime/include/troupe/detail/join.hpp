// The joining side of the cluster handshake, for Troupe's own binaries (run_app, the console)
// and tests: connect to the coordinator's gatekeeper and prove the cluster secret. Blocks the
// calling thread (never call it from inside an actor).
#pragma once

#include <string>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "messages/protocol.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"

namespace troupe {

// Connects to the coordinator's gatekeeper (retrying until --join-timeout), runs the
// handshake as `sender` and returns the coordinator. Fails with errc::authentication_failed
// when either side does not know the secret and errc::timeout when nobody answers. `joined`,
// when given, is set to the address of the coordinator that admitted us.
caf::expected<coordinator_actor> join_cluster(caf::actor_system& sys, const launch_options& opts,
                                              role sender, const std::string& name,
                                              const logger& log, host_port* joined = nullptr);

}  // namespace troupe
