// What a parameter_service and its clients share (troupe/parameter_service.hpp), for
// parameter_service.cpp and for app_node.cpp, which serves a service to remote actors.
// Internal to actors/app.
#pragma once

#include <chrono>
#include <vector>

#include <caf/actor.hpp>

#include "messages/protocol.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/parameter_service.hpp"

namespace troupe {

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
};

// The directory of a service (its tensors, plan, clients and timeout) as it travels.
service_directory directory_of(const parameter_service::shared& service);

}  // namespace troupe
