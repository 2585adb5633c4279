// What a parameter_service and its clients share (troupe/parameter_service.hpp), for
// parameter_service.cpp and for app_node.cpp, which serves a service to remote actors.
// Internal to actors/app.
#pragma once

#include <chrono>
#include <vector>

#include <caf/actor.hpp>

#include <functional>
#include <memory>
#include <mutex>

#include "actors/transport/lane_client.hpp"
#include "actors/transport/lane_server.hpp"
#include "messages/protocol.hpp"
#include "troupe/app_node.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/parameter_service.hpp"

namespace troupe {

// The buckets of a service this process started, as they start (a restarted one too), and the
// data lanes of the nodes that serve it: each bucket is enrolled on each lane, so that a lane's
// frames may name it.
struct bucket_enrollment {
  std::mutex lock;
  std::vector<bucket_actor> current;  // by bucket id (null: not started yet)
  std::vector<std::shared_ptr<lane_listener>> lanes;

  void started(uint32_t b, const bucket_actor& bucket);
  void add_lane(std::shared_ptr<lane_listener> lane);
};

struct parameter_service::shared {
  flat_layout layout;
  placement plan;
  uint32_t clients = 0;
  std::chrono::milliseconds timeout;
  caf::actor supervisor;
  std::vector<bucket_actor> buckets;  // as started; a client finds a restarted one again
  bool owned = true;                  // started here (stop() ends it); false: connected to
  std::vector<table_spec> tables;     // embedding tables, their rows hashed over the buckets
  logger log{"parameters"};           // where its clients say that a bucket is found again
  std::shared_ptr<bucket_enrollment> enrollment = std::make_shared<bucket_enrollment>();
  lane_map lanes;  // to the serving node's data lane, or the servers' (those that have one)
  // On server nodes (parameter_service::start with servers): the coordinator that placed the
  // buckets and names a bucket's successor, and the servers (none: in the serving process).
  caf::actor coordinator;
  std::vector<endpoint> servers;
  std::function<void()> release;  // a service started here on servers: the node's servers are free
};

// A service's shared part, its plan cut over `servers` (1: in-process), and each bucket's spec
// checked as a server receives it: errc::bad_configuration or shape_mismatch for a
// configuration that cannot be served.
struct service_layout {
  std::shared_ptr<parameter_service::shared> shared;
  std::vector<bucket_spec> specs;
};
caf::expected<service_layout> lay_out_service(const parameter_service_config& config,
                                              uint32_t servers);

// A service on servers' coordinator as its node admitted it: the actor, the cluster secret for
// data lanes ("" where the node allows none: TLS, --no-data-lane), and `release`, which frees
// the node's servers for another service (it runs when the coordinator ends, too).
struct servers_admission {
  caf::actor coordinator;
  std::string lane_secret;
  std::function<void()> release;
};

// Spawns `coordinator` with the node's options, and the servers that join `node` get it from
// now on; errc::bad_configuration when they already join another service's (app_node.cpp).
caf::expected<servers_admission> admit_servers_for(
    const app_node& node, const std::function<caf::actor(const launch_options&)>& coordinator);

// A service on servers' buckets as they are now (a backup may have taken over since it
// started), asked of its coordinator; those it started with when it does not answer in time.
std::vector<bucket_actor> buckets_now(const parameter_service::shared& service);

// Stops a service this process started on servers: its coordinator and the servers, waiting
// a bounded time; the node's servers are free for another service then (service_on_servers.cpp).
void stop_service_on_servers(const parameter_service::shared& service);

// The directory of a service (its tensors, plan, clients and timeout) as it travels.
service_directory directory_of(const parameter_service::shared& service);

}  // namespace troupe
