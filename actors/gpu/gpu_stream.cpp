#include "actors/gpu/gpu_stream.hpp"

#include <fmt/format.h>

#include <caf/typed_event_based_actor.hpp>

#include <cstring>
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
  cudaEvent_t computed = nullptr, transferred = nullptr;  // the last job of each stream
  cublasHandle_t blas = nullptr;
  std::unique_ptr<device_pool> pool;     // device buffers
  std::unique_ptr<device_pool> staging;  // pinned host pages: copies that never block
  std::unordered_map<uint64_t, buffer_entry> buffers;
  std::unordered_map<uint64_t, std::function<void()>> pending;  // ticket -> what finishing does
  uint64_t next_buffer = 1, next_ticket = 1;
  caf::error broken;  // set when the device could not be set up: every request gets it

  ~gpu_stream_state() {
    if (compute) cudaStreamSynchronize(compute);
    if (transfer) cudaStreamSynchronize(transfer);
    pool.reset();
    staging.reset();
    if (blas) cublasDestroy(blas);
    for (cudaEvent_t e : {computed, transferred})
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
  for (cudaEvent_t* e : {&st.computed, &st.transferred})
    if (auto err = cudaEventCreateWithFlags(e, cudaEventDisableTiming))
      return cuda_error("cudaEventCreate", err);
  if (cublasCreate(&st.blas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(st.blas, st.compute) != CUBLAS_STATUS_SUCCESS)
    return make_error(errc::device_failure, "cublasCreate failed");
  st.pool = std::make_unique<device_pool>(config.page_bytes, config.capacity_bytes);
  st.staging = std::make_unique<device_pool>(config.page_bytes, config.staging_bytes,
                                             device_pool::memory::pinned_host);
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

// Refuses new work while max_pending jobs wait (every queue has a bound).
caf::error room_for_more(const gpu_stream_state& st, const gpu_stream_config& config) {
  if (st.pending.size() < config.max_pending) return {};
  return make_error(errc::device_failure,
                    fmt::format("more than {} GPU jobs are waiting", config.max_pending));
}

// Runs `done` on this actor once everything queued on `stream` so far has finished.
caf::error when_finished(self_ptr self, cudaStream_t stream, std::function<void()> done) {
  auto& st = self->state;
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

// Copies go through pinned staging pages, so cudaMemcpyAsync returns at once (a copy from
// pageable memory would hold this thread until it is done).
caf::result<bool> upload(self_ptr self, const gpu_stream_config& config, uint64_t id,
                         host_values values) {
  auto& st = self->state;
  auto it = st.buffers.find(id);
  if (it == st.buffers.end() || !values || values->size() > it->second.floats)
    return make_error(errc::bad_configuration, "upload: no such buffer, or too many values");
  if (auto err = room_for_more(st, config)) return err;
  const size_t bytes = values->size() * sizeof(float);
  auto staged = st.staging->acquire(bytes);
  if (!staged) return std::move(staged.error());
  std::memcpy(*staged, values->data(), bytes);
  // Not over values that queued computation may still read.
  cudaError_t err = cudaStreamWaitEvent(st.transfer, st.computed, 0);
  if (!err)
    err = cudaMemcpyAsync(it->second.ptr, *staged, bytes, cudaMemcpyHostToDevice, st.transfer);
  if (!err) err = cudaEventRecord(st.transferred, st.transfer);
  if (err) {
    st.staging->release(*staged);
    return cuda_error("upload", err);
  }
  auto promise = self->make_response_promise<bool>();
  void* page = *staged;
  if (auto failed = when_finished(self, st.transfer, [self, promise, page]() mutable {
        self->state.staging->release(page);
        promise.deliver(true);
      }))
    promise.deliver(std::move(failed));  // the staging page stays out of use: it may be read
  return promise;
}

caf::result<host_result> download(self_ptr self, const gpu_stream_config& config, uint64_t id,
                                  host_result into) {
  auto& st = self->state;
  auto it = st.buffers.find(id);
  if (it == st.buffers.end())
    return make_error(errc::bad_configuration, "download: no such buffer");
  if (auto err = room_for_more(st, config)) return err;
  const uint64_t floats = it->second.floats;
  auto staged = st.staging->acquire(floats * sizeof(float));
  if (!staged) return std::move(staged.error());
  cudaError_t err = cudaStreamWaitEvent(st.transfer, st.computed, 0);
  if (!err)
    err = cudaMemcpyAsync(*staged, it->second.ptr, floats * sizeof(float), cudaMemcpyDeviceToHost,
                          st.transfer);
  if (!err) err = cudaEventRecord(st.transferred, st.transfer);  // later jobs wait for it
  if (err) {
    st.staging->release(*staged);
    return cuda_error("download", err);
  }
  auto promise = self->make_response_promise<host_result>();
  void* page = *staged;
  auto done = [self, promise, page, floats, into = std::move(into)]() mutable {
    const auto* from = static_cast<const float*>(page);
    if (!into) into = std::make_shared<std::vector<float>>();
    into->assign(from, from + floats);
    self->state.staging->release(page);
    promise.deliver(std::move(into));
  };
  if (auto failed = when_finished(self, st.transfer, std::move(done)))
    promise.deliver(std::move(failed));
  return promise;
}

caf::result<bool> run(self_ptr self, const gpu_stream_config& config, const gpu_work& work) {
  auto& st = self->state;
  if (!work) return make_error(errc::bad_configuration, "run: no work");
  if (auto err = room_for_more(st, config)) return err;
  if (auto err = cudaStreamWaitEvent(st.compute, st.transferred, 0))
    return cuda_error("cudaStreamWaitEvent", err);
  const gpu_context context{st.compute, st.transfer, st.blas,
                            [self](uint64_t id) { return pointer_of(self->state, id); }};
  const cudaError_t failed = work(context);
  // Fenced even when the work failed: kernels it queued before failing may still run.
  if (auto err = cudaEventRecord(st.computed, st.compute)) return cuda_error("event", err);
  if (failed) return cuda_error("GPU work", failed);
  auto promise = self->make_response_promise<bool>();
  if (auto err = when_finished(self, st.compute, [promise]() mutable { promise.deliver(true); }))
    promise.deliver(std::move(err));
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
        if (cudaStreamWaitEvent(st.compute, st.transferred, 0) != cudaSuccess ||
            when_finished(self, st.compute, [self, ptr] { self->state.pool->release(ptr); }))
          config.log.warn("buffer {} is not reused: its release could not be queued", id);
      },
      [=](upload_atom, uint64_t id, host_values values) -> caf::result<bool> {
        if (self->state.broken) return self->state.broken;
        return upload(self, config, id, std::move(values));
      },
      [=](download_atom, uint64_t id) -> caf::result<host_result> {
        if (self->state.broken) return self->state.broken;
        return download(self, config, id, nullptr);
      },
      [=](download_atom, uint64_t id, host_result into) -> caf::result<host_result> {
        if (self->state.broken) return self->state.broken;
        return download(self, config, id, std::move(into));
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
    return make_error(errc::device_failure,
                      fmt::format("no GPU {} ({} visible)", config.device, devices));
  return sys.spawn<caf::detached>(gpu_stream, std::move(config));
}

}  // namespace troupe
