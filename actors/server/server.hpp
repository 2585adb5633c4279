// server: the host actor of a server node. It joins the coordinator and keeps the node's
// supervisor (one_for_one), which spawns a parameter_bucket for every bucket the coordinator
// places here and restarts it, state intact, when it fails: the coordinator learns each new
// handle. When the supervisor gives up (more than --max-restarts in --restart-period-ms) the
// server tells the coordinator and ends: the node's buckets are lost with it. Quits when the
// coordinator says the job is over (or is lost for good: with a standby listed, it rejoins the
// standby once that took over). Accepts exit messages only from `supervisor`.
#pragma once

#include <map>
#include <optional>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/bucket/dash_device.hpp"
#include "actors/supervision/failure/coordinator_link.hpp"
#include "actors/supervision/supervisors/supervisor.hpp"
#include "actors/transport/lane_server.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"
#include "troupe/metrics.hpp"
#include "troupe/update_rule.hpp"

namespace troupe {

struct server_state {
  static inline const char* name = "troupe.server";
  server_state() = default;  // not an aggregate: CAF would build it from the actor pointer
  supervisor_actor buckets;  // the node's supervisor, parent of every bucket here
  size_t hosted = 0;
  std::map<uint32_t, bucket_actor> buckets_here;  // by bucket id: each one's current actor
  uint32_t rank = 0;                              // from the join reply
  bool stopping = false;
};

struct server_config {
  coordinator_link_ptr coordinator;
  std::string name;
  std::chrono::seconds request_timeout{30};
  caf::actor_addr supervisor;
  logger log;
  endpoint data;  // this node's own port for workers (port 0: in-process, none)
  uint32_t max_restarts = 3;
  std::chrono::milliseconds restart_period{10000};
  std::shared_ptr<metrics_registry> metrics;  // the node's; none: no metrics
  // --dash-device gpu: the process's DASH device (the launcher's), handed to every bucket here.
  std::optional<dash_device_actor> dash_device;
  update_rules rules;  // the app's (--optimizer NAME); a bucket needing another is refused
  // The node's data lane listener (data.lane is its port): every bucket here is enrolled with
  // it, and it stops when the server ends. None: workers reach the buckets over CAF only.
  std::shared_ptr<lane_listener> lanes;
};

server_actor::behavior_type server(server_actor::stateful_pointer<server_state> self,
                                   server_config config);

}  // namespace troupe
