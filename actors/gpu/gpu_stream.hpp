// gpu_stream: the actor that owns one GPU for its process. It holds the device, a compute
// stream and a transfer stream (so copies overlap computation), a pooled device allocator
// (device_pool, fixed-size pages), pinned host pages for copies (so cudaMemcpyAsync returns at
// once) and a cuBLAS handle on the compute stream. Messages enqueue
// work and return at once; the reply comes when the work's completion reaches the actor (a
// host callback on the stream sends it `event`), so no thread ever blocks on the GPU.
//   alloc:    floats -> a buffer id (device memory from the pool)
//   release:  buffer id (its pages go back to the pool once queued work is done with them)
//   upload:   buffer id, host values -> true once the copy landed (transfer stream)
//   download: buffer id -> its values, after every compute job queued before; given a host
//             vector too, into that one (resized to the buffer; the caller hands it over until
//             the answer), which spares a fresh allocation per download
//   run:      gpu_work -> true once it ran; the work gets the streams, the cuBLAS handle and
//             the device pointer of any buffer id, and enqueues (kernels/cuda: e.g. a DASH
//             group step); compute waits for uploads queued before it
// Each message's answer is an error (errc::device_failure, bad_configuration for an unknown
// buffer) when CUDA fails. Local only: its messages never cross a process. Built only with
// CUDA (TROUPE_HAVE_CUDA); spawn_gpu_stream refuses where no GPU is visible, and callers then
// run the CPU kernels.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/typed_actor.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

// What a `run` job may use: the streams, the cuBLAS handle (bound to `compute`) and the device
// pointer of a buffer id (null for an unknown id).
struct gpu_context {
  cudaStream_t compute = nullptr;
  cudaStream_t transfer = nullptr;
  cublasHandle_t blas = nullptr;
  std::function<float*(uint64_t)> buffer;
};

// Enqueues work on the context's streams and returns; a CUDA error refuses the job.
using gpu_work = std::function<cudaError_t(const gpu_context&)>;
using host_values = std::shared_ptr<const std::vector<float>>;
using host_result = std::shared_ptr<std::vector<float>>;

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::gpu_work)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::host_values)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::host_result)

namespace troupe {

using gpu_stream_actor = caf::typed_actor<
    caf::replies_to<alloc_atom, uint64_t>::with<uint64_t>, caf::reacts_to<release_atom, uint64_t>,
    caf::replies_to<upload_atom, uint64_t, host_values>::with<bool>,
    caf::replies_to<download_atom, uint64_t>::with<host_result>,
    caf::replies_to<download_atom, uint64_t, host_result>::with<host_result>,
    caf::replies_to<run_atom, gpu_work>::with<bool>, caf::reacts_to<event_atom, uint64_t>>;

struct gpu_stream_config {
  int device = 0;
  size_t page_bytes = size_t{4} << 20;      // the pool's page
  size_t capacity_bytes = size_t{8} << 30;  // the most the device pool reserves
  size_t staging_bytes = size_t{1} << 30;   // the most pinned host memory for copies
  size_t max_pending = 1024;                // jobs queued and not yet finished
  logger log{"gpu"};
};

// Spawns the stream actor for `config.device`; errc::device_failure where no GPU is visible
// (or the device cannot be set up). Detached: CUDA calls may take a while to return.
caf::expected<gpu_stream_actor> spawn_gpu_stream(caf::actor_system& sys, gpu_stream_config config);

}  // namespace troupe
