#include "actors/gpu/gpu_stream.hpp"

#include <fmt/format.h>

#include <caf/typed_event_based_actor.hpp>

#include <unordered_map>

#include "actors/gpu/device_pool.hpp"
#include "kernels/cuda/device.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

struct buffer_entry {
  void* ptr = nullptr;
  uint64_t floats = 0;
};

struct gpu_stream_state {
  static inline const char* name = "troupe.gpu_stream";
  cudaStream_t compute = nullptr, transfer = nullptr;
  cudaEvent_t computed = nullptr, uploaded = nullptr;  // the last job of each stream
  cublasHandle_t blas = nullptr;
  std::unique_ptr<device_pool> pool;
  std::unordered_map<uint64_t, buffer_entry> buffers;
  std::unordered_map<uint64_t, std::function<void()>> pending;  // ticket -> what finishing does
  uint64_t next_buffer = 1, next_ticket = 1;
  caf::error broken;  // set when the device could not be set up: every request gets it

  ~gpu_stream_state() {
    if (compute) cudaStreamSynchronize(compute);
    if (transfer) cudaStreamSynchronize(transfer);
    pool.reset();
    if (blas) cublasDestroy(blas);
    for (cudaEvent_t e : {computed, uploaded})
      if (e) cudaEventDestroy(e);
    for (cudaStream_t s : {compute, transfer})
      if (s) cudaStreamDestroy(s);
  }
};

using self_ptr = gpu_stream_actor::stateful_pointer<gpu_stream_state>;

caf::error cuda_error(const char* what, cudaError_t err) {
  cudaGetLastError();
  return make_error(errc::device_failure, fmt::format("{}: {}", what, cudaGetErrorString(err)));
}

caf::error set_up(gpu_stream_state& st, const gpu_stream_config& config) {
  if (auto err = cudaSetDevice(config.device)) return cuda_error("cudaSetDevice", err);
  for (cudaStream_t* s : {&st.compute, &st.transfer})
    if (auto err = cudaStreamCreateWithFlags(s, cudaStreamNonBlocking))
      return cuda_error("cudaStreamCreate", err);
  for (cudaEvent_t* e : {&st.computed, &st.uploaded})
    if (auto err = cudaEventCreateWithFlags(e, cudaEventDisableTiming))
      return cuda_error("cudaEventCreate", err);
  if (cublasCreate(&st.blas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(st.blas, st.compute) != CUBLAS_STATUS_SUCCESS)
    return make_error(errc::device_failure, "cublasCreate failed");
  st.pool = std::make_unique<device_pool>(config.page_bytes, config.capacity_bytes);
  return {};
}

struct completion {
  caf::actor target;
  uint64_t ticket;
};

void CUDART_CB on_complete(void* data) {
  std::unique_ptr<completion> c{static_cast<completion*>(data)};
  caf::anon_send(c->target, event_atom_v, c->ticket);
}

// Runs `done` on this actor once everything queued on `stream` so far has finished.
caf::error when_finished(self_ptr self, const gpu_stream_config& config, cudaStream_t stream,
                         std::function<void()> done) {
  auto& st = self->state;
  if (st.pending.size() >= config.max_pending)
    return make_error(errc::device_failure,
                      fmt::format("more than {} GPU jobs are waiting", config.max_pending));
  const uint64_t ticket = st.next_ticket++;
  auto* c = new completion{caf::actor_cast<caf::actor>(self), ticket};
  if (auto err = cudaLaunchHostFunc(stream, on_complete, c)) {
    delete c;
    return cuda_error("cudaLaunchHostFunc", err);
  }
  st.pending.emplace(ticket, std::move(done));
  return {};
}

float* pointer_of(const gpu_stream_state& st, uint64_t id) {
  auto it = st.buffers.find(id);
  return it == st.buffers.end() ? nullptr : static_cast<float*>(it->second.ptr);
}

caf::result<bool> upload(self_ptr self, const gpu_stream_config& config, uint64_t id,
                         host_values values) {
  auto& st = self->state;
  auto it = st.buffers.find(id);
  if (it == st.buffers.end() || !values || values->size() > it->second.floats)
    return make_error(errc::bad_configuration, "upload: no such buffer, or too many values");
  // Not over values that queued computation may still read.
  if (auto err = cudaStreamWaitEvent(st.transfer, st.computed, 0))
    return cuda_error("cudaStreamWaitEvent", err);
  if (auto err = cudaMemcpyAsync(it->second.ptr, values->data(), values->size() * sizeof(float),
                                 cudaMemcpyHostToDevice, st.transfer))
    return cuda_error("upload", err);
  if (auto err = cudaEventRecord(st.uploaded, st.transfer)) return cuda_error("event", err);
  auto promise = self->make_response_promise<bool>();
  if (auto err = when_finished(self, config, st.transfer,
                               [promise, values]() mutable { promise.deliver(true); }))
    return err;
  return promise;
}

caf::result<host_result> download(self_ptr self, const gpu_stream_config& config, uint64_t id) {
  auto& st = self->state;
  auto it = st.buffers.find(id);
  if (it == st.buffers.end())
    return make_error(errc::bad_configuration, "download: no such buffer");
  auto out = std::make_shared<std::vector<float>>(it->second.floats);
  if (auto err = cudaStreamWaitEvent(st.transfer, st.computed, 0))
    return cuda_error("cudaStreamWaitEvent", err);
  if (auto err = cudaMemcpyAsync(out->data(), it->second.ptr, out->size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, st.transfer))
    return cuda_error("download", err);
  auto promise = self->make_response_promise<host_result>();
  if (auto err = when_finished(self, config, st.transfer,
                               [promise, out]() mutable { promise.deliver(out); }))
    return err;
  return promise;
}

caf::result<bool> run(self_ptr self, const gpu_stream_config& config, const gpu_work& work) {
  auto& st = self->state;
  if (!work) return make_error(errc::bad_configuration, "run: no work");
  if (auto err = cudaStreamWaitEvent(st.compute, st.uploaded, 0))
    return cuda_error("cudaStreamWaitEvent", err);
  const gpu_context context{st.compute, st.transfer, st.blas,
                            [self](uint64_t id) { return pointer_of(self->state, id); }};
  if (auto err = work(context)) return cuda_error("GPU work", err);
  if (auto err = cudaEventRecord(st.computed, st.compute)) return cuda_error("event", err);
  auto promise = self->make_response_promise<bool>();
  if (auto err =
          when_finished(self, config, st.compute, [promise]() mutable { promise.deliver(true); }))
    return err;
  return promise;
}

gpu_stream_actor::behavior_type gpu_stream(self_ptr self, gpu_stream_config config) {
  auto& st = self->state;
  st.broken = set_up(st, config);
  if (st.broken) config.log.error("GPU {} unusable: {}", config.device, describe(st.broken));
  return {
      [=](alloc_atom, uint64_t floats) -> caf::result<uint64_t> {
        auto& st = self->state;
        if (st.broken) return st.broken;
        auto ptr = st.pool->acquire(std::max<uint64_t>(floats, 1) * sizeof(float));
        if (!ptr) return std::move(ptr.error());
        const uint64_t id = st.next_buffer++;
        st.buffers.emplace(id, buffer_entry{*ptr, floats});
        return id;
      },
      [=](release_atom, uint64_t id) {
        auto& st = self->state;
        auto it = st.buffers.find(id);
        if (it == st.buffers.end() || st.broken) return;
        void* ptr = it->second.ptr;
        st.buffers.erase(it);
        // Back to the pool once both streams are past every job queued so far.
        if (cudaStreamWaitEvent(st.compute, st.uploaded, 0) != cudaSuccess ||
            when_finished(self, config, st.compute,
                          [self, ptr] { self->state.pool->release(ptr); }))
          config.log.warn("buffer {} is not reused: its release could not be queued", id);
      },
      [=](upload_atom, uint64_t id, host_values values) -> caf::result<bool> {
        if (self->state.broken) return self->state.broken;
        return upload(self, config, id, std::move(values));
      },
      [=](download_atom, uint64_t id) -> caf::result<host_result> {
        if (self->state.broken) return self->state.broken;
        return download(self, config, id);
      },
      [=](run_atom, const gpu_work& work) -> caf::result<bool> {
        if (self->state.broken) return self->state.broken;
        return run(self, config, work);
      },
      [=](event_atom, uint64_t ticket) {
        auto& st = self->state;
        auto it = st.pending.find(ticket);
        if (it == st.pending.end()) return;
        auto done = std::move(it->second);
        st.pending.erase(it);
        done();
      },
  };
}

}  // namespace

caf::expected<gpu_stream_actor> spawn_gpu_stream(caf::actor_system& sys, gpu_stream_config config) {
  const int devices = kernels::cuda::device_count();
  if (config.device < 0 || config.device >= devices)
    return make_error(
        errc::device_failure,
        fmt::format("no GPU {} ({} visible): the CPU kernels run instead", config.device, devices));
  return sys.spawn<caf::detached>(gpu_stream, std::move(config));
}

}  // namespace troupe
