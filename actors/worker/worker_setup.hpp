// worker_setup: the parts of a worker's start and rejoin that need nothing of its actor, only
// of its configuration and state (worker.cpp calls them).
//   connect_servers()  a direct CAF connection to every server node of the job, so pulls and
//                      pushes skip the coordinator's node, and a data lane (actors/lane) to
//                      each server that offers one when the worker holds the cluster secret.
//                      A server it cannot reach directly is still reached through the
//                      coordinator; one without a lane, over CAF. Blocking: call it from the
//                      detached worker.
//   rejoin_request_of() what the worker tells a standby coordinator that took over.
//   compress_gradient(), push_wire() what a push to one bucket carries.
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

// The push for bucket b. Its dense gradient is encoded from st.grad where it is, or, for a
// bucket of this process, gathered into the message itself (nothing encoded). st.grad stays as
// it is until every bucket has acknowledged, so a resend encodes the same values.
wire push_wire(const worker_state& st, size_t b, const push_request& push, bool in_process);

// Whether the push carries st.grad's values (not skipped, not sign-compressed).
bool pushes_gradient(const worker_state& st, const push_request& push);

// Writes the push for bucket b (as push_wire encodes it for another process) straight onto a
// data lane: the gradient goes from st.grad to the socket with no copy between. Returns the
// request's response handle; `bytes` gets its size.
template <class Self>
auto push_over_lane(Self* self, const worker_state& st, size_t b, const push_request& push,
                    lane_link& link, size_t& bytes) {
  const auto& plan = st.job->layout.buckets[b];
  return push_over_lane(self, link, st.buckets[b].id(), [&](auto write) {
    bytes = encode_to(push, views(*st.layout, plan, st.grad), write);
  });
}

// The same push and, behind it, the pull `pull` of the same bucket, as one pair of frames
// (push_and_pull_over_lane). Returns the two response handles, the push's first.
template <class Self>
auto push_and_pull_over_lane(Self* self, const worker_state& st, size_t b, const push_request& push,
                             const wire& pull, lane_link& link, size_t& bytes) {
  const auto& plan = st.job->layout.buckets[b];
  return push_and_pull_over_lane(
      self, link, st.buckets[b].id(),
      [&](auto write) { bytes = encode_to(push, views(*st.layout, plan, st.grad), write); }, pull);
}

}  // namespace troupe
