// dash_device over a gpu_stream: each packed step is one device buffer (alloc, upload), a
// workspace, one `run` of every group's step (kernels/cuda/dash.hpp) and one download. Jobs
// from different buckets may interleave: the gpu_stream orders copies against computation.
#include "actors/bucket/dash_device.hpp"

#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>

#include "actors/gpu/gpu_stream.hpp"
#include "kernels/cuda/dash.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

struct dash_device_state {
  static inline const char* name = "troupe.dash_device";
};

using self_ptr = dash_device_actor::stateful_pointer<dash_device_state>;

// One job on its way through the gpu_stream.
struct attempt {
  dash_job job;
  caf::typed_response_promise<dash_job> promise;
  uint64_t data = 0, workspace = 0;  // buffer ids, 0 until allocated
};
using attempt_ptr = std::shared_ptr<attempt>;

struct route {
  self_ptr self;
  gpu_stream_actor gpu;
  dash_device_config config;
};

kernels::cuda::dash_step_params params_of(const kernels::packed_hyper& h) {
  kernels::cuda::dash_step_params p;
  p.lr = h.lr;
  p.beta = h.beta;
  p.beta1 = h.beta1;
  p.beta2 = h.beta2;
  p.epsilon = h.epsilon;
  p.weight_decay = h.weight_decay;
  p.damping = h.damping;
  p.nesterov = h.nesterov;
  p.step = h.step;
  p.compute_roots = h.compute_roots;
  return p;
}

uint64_t workspace_floats(const kernels::packed_dash_step& job) {
  size_t most = 1;
  for (const auto& g : job.groups)
    most = std::max(
        most, kernels::cuda::dash_workspace_floats(
                  static_cast<int>(g.rows), static_cast<int>(g.cols), static_cast<int>(g.count)));
  return most;
}

// The GPU work of one job: every group's step on the packed buffer, in order.
gpu_work group_steps(kernels::packed_dash_step layout, uint64_t data, uint64_t workspace) {
  layout.values.reset();  // the host copy is not needed on the stream's thread
  return [layout, data, workspace](const gpu_context& context) -> cudaError_t {
    float* base = context.buffer(data);
    float* work = context.buffer(workspace);
    if (!base || !work) return cudaErrorInvalidValue;
    const auto p = params_of(layout.hyper);
    for (const auto& g : layout.groups) {
      const kernels::cuda::dash_group_buffers buffers{
          static_cast<int>(g.rows),
          static_cast<int>(g.cols),
          static_cast<int>(g.count),
          reinterpret_cast<const uint32_t*>(base + g.row0),
          reinterpret_cast<const uint32_t*>(base + g.col0),
          base + g.left,
          base + g.right,
          base + g.left_root,
          base + g.right_root,
          base + g.m,
          base + g.v,
          work,
          reinterpret_cast<int*>(base + g.resets)};
      if (auto err = kernels::cuda::dash_group_step(context.blas, context.compute,
                                                    base + layout.theta, base + layout.grad,
                                                    static_cast<int>(layout.cols), buffers, p))
        return err;
    }
    return cudaSuccess;
  };
}

// Gives the job's buffers back (after the work queued on them) and answers with `err`.
void fail(const route& r, const attempt_ptr& a, caf::error err) {
  for (uint64_t id : {a->data, a->workspace})
    if (id) r.self->send(r.gpu, release_atom_v, id);
  a->data = a->workspace = 0;
  r.config.log.warn("a DASH step failed on the GPU: {}", describe(err));
  a->promise.deliver(std::move(err));
}

void download(const route& r, const attempt_ptr& a) {
  // Into the uploaded values: the upload copied them out before it answered.
  const size_t packed = a->job->values->size();
  r.self->request(r.gpu, r.config.request_timeout, download_atom_v, a->data, a->job->values)
      .then(
          [r, a, packed](const host_result& values) {
            if (!values || values->size() < packed)
              return fail(r, a, make_error(errc::device_failure, "a short DASH download"));
            values->resize(packed);
            a->job->values = values;
            for (uint64_t id : {a->data, a->workspace}) r.self->send(r.gpu, release_atom_v, id);
            a->promise.deliver(a->job);
          },
          [r, a](caf::error& err) { fail(r, a, std::move(err)); });
}

void run_steps(const route& r, const attempt_ptr& a) {
  r.self
      ->request(r.gpu, r.config.request_timeout, run_atom_v,
                group_steps(*a->job, a->data, a->workspace))
      .then([r, a](bool) { download(r, a); },
            [r, a](caf::error& err) { fail(r, a, std::move(err)); });
}

void upload(const route& r, const attempt_ptr& a) {
  r.self
      ->request(r.gpu, r.config.request_timeout, upload_atom_v, a->data,
                host_values{a->job->values})
      .then([r, a](bool) { run_steps(r, a); },
            [r, a](caf::error& err) { fail(r, a, std::move(err)); });
}

void allocate(const route& r, const attempt_ptr& a) {
  r.self->request(r.gpu, r.config.request_timeout, alloc_atom_v, uint64_t{a->job->values->size()})
      .then(
          [r, a](uint64_t data) {
            a->data = data;
            r.self
                ->request(r.gpu, r.config.request_timeout, alloc_atom_v, workspace_floats(*a->job))
                .then(
                    [r, a](uint64_t workspace) {
                      a->workspace = workspace;
                      upload(r, a);
                    },
                    [r, a](caf::error& err) { fail(r, a, std::move(err)); });
          },
          [r, a](caf::error& err) { fail(r, a, std::move(err)); });
}

dash_device_actor::behavior_type dash_device(self_ptr self, gpu_stream_actor gpu,
                                             dash_device_config config) {
  self->link_to(gpu);  // the stream ends with this actor
  const route r{self, gpu, config};
  return {
      [r](run_atom, dash_job job) -> caf::result<dash_job> {
        if (!job || !job->values || job->values->empty())
          return make_error(errc::malformed_message, "an empty DASH job");
        auto a = std::make_shared<attempt>();
        a->job = std::move(job);
        a->promise = r.self->make_response_promise<dash_job>();
        allocate(r, a);
        return a->promise;
      },
  };
}

}  // namespace

caf::expected<dash_device_actor> spawn_dash_device(caf::actor_system& sys,
                                                   dash_device_config config) {
  gpu_stream_config stream;
  stream.device = config.device;
  stream.log = config.log;
  // Room for two buckets' packages on the way in and two on the way out.
  stream.staging_bytes = 4 * kernels::max_packed_bytes;
  auto gpu = spawn_gpu_stream(sys, stream);
  if (!gpu) return std::move(gpu.error());
  // A GPU that is visible may still fail to set up: one small allocation tells, now rather
  // than at the first step.
  caf::error probe;
  caf::scoped_actor self{sys};
  // The first request also waits for the CUDA context and cuBLAS: give it time.
  const auto probe_timeout = std::max(std::chrono::seconds(60), 4 * config.request_timeout);
  self->request(*gpu, probe_timeout, alloc_atom_v, uint64_t{1})
      .receive([&](uint64_t id) { self->send(*gpu, release_atom_v, id); },
               [&](caf::error& err) { probe = std::move(err); });
  if (probe) {
    self->send_exit(*gpu, caf::exit_reason::user_shutdown);
    return probe;
  }
  return sys.spawn(dash_device, std::move(*gpu), std::move(config));
}

}  // namespace troupe
