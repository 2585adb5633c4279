// worker_setup: the parts of a worker's start and rejoin that need nothing of its actor, only
// of its configuration and state (worker.cpp calls them).
//   connect_servers()  a direct CAF connection to every server node of the job, so pulls and
//                      pushes skip the coordinator's node, and a data lane (actors/lane) to
//                      each server that offers one when the worker holds the cluster secret.
//                      A server it cannot reach directly is still reached through the
//                      coordinator; one without a lane, over CAF. Blocking: call it from the
//                      detached worker.
//   rejoin_request_of() what the worker tells a standby coordinator that took over.
//   compress_gradient(), pushes_gradient() what a push to one bucket carries.
#pragma once

#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/lane/lane_client.hpp"
#include "actors/worker/worker.hpp"
#include "troupe/detail/layout.hpp"

namespace troupe {

// The lanes it opened; each ends when the worker's state lets it go.
lane_map connect_servers(caf::actor_system& sys, const worker_config& config,
                         const std::vector<endpoint>& servers);

rejoin_request rejoin_request_of(const worker_state& st, const worker_config& config);

// One sign tensor per slice of bucket `plan`, with this worker's error feedback residual.
std::vector<sign_tensor> compress_gradient(worker_state& st, const bucket_placement& plan);

// Whether the push carries st.grad's values (not skipped, not sign-compressed).
bool pushes_gradient(const worker_state& st, const push_request& push);

}  // namespace troupe
