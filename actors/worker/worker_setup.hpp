// worker_setup: the parts of a worker's start and rejoin that need nothing of its actor, only
// of its configuration and state (worker.cpp calls them).
//   rejoin_request_of() what the worker tells a standby coordinator that took over.
//   compress_gradient(), pushes_gradient() what a push to one bucket carries.
#pragma once

#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/transport/lane_client.hpp"
#include "actors/worker/worker.hpp"
#include "troupe/detail/layout.hpp"

namespace troupe {

rejoin_request rejoin_request_of(const worker_state& st, const worker_config& config);

// One sign tensor per slice of bucket `plan`, with this worker's error feedback residual.
std::vector<sign_tensor> compress_gradient(worker_state& st, const bucket_placement& plan);

// Whether the push carries st.grad's values (not skipped, not sign-compressed).
bool pushes_gradient(const worker_state& st, const push_request& push);

}  // namespace troupe
