#include "actors/transport/server_links.hpp"

#include "troupe/net.hpp"

namespace troupe {

std::vector<endpoint> connect_to_servers(caf::actor_system& sys,
                                         const std::vector<endpoint>& servers,
                                         const std::string& secret,
                                         std::chrono::milliseconds timeout, const logger& log,
                                         lane_map& lanes, const std::string& what) {
  std::vector<endpoint> reached;
  for (const auto& server : servers) {
    if (server.port == 0) continue;  // in this process
    auto node = net::connect(sys, server.host, server.port, timeout);
    if (!node) {
      log.warn(
          "no direct connection to the server at {}:{} ({}); {} go through the node that "
          "named it",
          server.host, server.port, sys.render(node.error()), what);
      continue;
    }
    reached.push_back(server);
    if (server.lane == 0 || secret.empty()) continue;
    if (lanes.open(server.host, server.lane, secret, timeout, log, what))
      log.info("{} go over the data lane to {}:{}", what, server.host, server.lane);
  }
  return reached;
}

}  // namespace troupe
