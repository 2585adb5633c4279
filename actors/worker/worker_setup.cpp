#include "actors/worker/worker_setup.hpp"

#include "actors/records/timing.hpp"
#include "kernels/cpu/compression.hpp"
#include "troupe/error.hpp"

namespace troupe {

rejoin_request rejoin_request_of(const worker_state& st, const worker_config& config) {
  rejoin_request request{role::worker, config.name, st.job->worker};
  request.clock = st.clock;
  request.compute_s = st.compute_s;
  request.wall_s = seconds_since(st.started);
  request.done = st.finished;
  request.held.assign(st.queue.begin(), st.queue.end());
  if (!st.current_reported) request.held.push_back(st.current);
  for (const auto& r : st.reported) {
    request.finished.push_back(r.chunk);
    request.finished_loss.push_back(r.loss);
  }
  request.steps = st.finished_steps;
  return request;
}

// One sign tensor per slice of bucket `plan`, with this worker's error feedback residual.
std::vector<sign_tensor> compress_gradient(worker_state& st, const bucket_placement& plan) {
  std::vector<sign_tensor> out;
  for (const auto& s : plan.slices) {
    const auto range = locate(*st.layout, s);  // validated when the job started
    const std::span<const float> g{st.grad.data() + range->offset, range->count};
    const std::span<float> e{st.residual.data() + range->offset, range->count};
    sign_tensor t{s.tensor, s.shape, s.row_offset, 0.0f,
                  std::vector<uint8_t>(kernels::sign_bytes(range->count))};
    t.scale = kernels::sign_compress(g, e, t.bits);
    out.push_back(std::move(t));
  }
  return out;
}

bool pushes_gradient(const worker_state& st, const push_request& push) {
  return !push.skipped && !st.job->compress_signs;
}

}  // namespace troupe
