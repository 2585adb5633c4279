// server: the host actor of a server node. It joins the coordinator, spawns a parameter_bucket
// for every bucket the coordinator places on it (and supervises them), and quits when the
// coordinator says the job is over (or is lost). Accepts exit messages only from `supervisor`.
#pragma once

#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

struct server_state {
  static inline const char* name = "troupe.server";
  std::vector<bucket_actor> buckets;
  bool stopping = false;
};

struct server_config {
  coordinator_actor coordinator;
  std::string name;
  std::chrono::seconds request_timeout{30};
  caf::actor_addr supervisor;
  logger log;
  endpoint data;  // this node's own port for workers (port 0: in-process, none)
};

server_actor::behavior_type server(server_actor::stateful_pointer<server_state> self,
                                   server_config config);

}  // namespace troupe
