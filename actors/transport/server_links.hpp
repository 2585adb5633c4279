// connect_to_servers: how a client process reaches the server nodes that hold its buckets (a
// ps worker, a hybrid member's tables, an app's parameter service on servers). Blocking: call
// it from main() or a detached actor.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/transport/lane_client.hpp"
#include "messages/types.hpp"
#include "troupe/log.hpp"

namespace troupe {

// Connects this process to each server node in `servers` directly (so that requests to its
// buckets skip the node that named it) and, with the cluster `secret`, opens a data lane into
// `lanes` to each one that offers one. A server it cannot connect to is still reached through
// the node that named it; one without a lane, over CAF (both say so in `log`, naming `what`
// goes that way, e.g. "the tables' rows"). Returns the servers it reached (either way).
std::vector<endpoint> connect_to_servers(caf::actor_system& sys,
                                         const std::vector<endpoint>& servers,
                                         const std::string& secret,
                                         std::chrono::milliseconds timeout, const logger& log,
                                         lane_map& lanes, const std::string& what);

}  // namespace troupe
