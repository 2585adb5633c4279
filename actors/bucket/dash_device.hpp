// dash_device: the actor through which parameter buckets step DASH on a GPU (--dash-device
// gpu). A bucket sends it one packed step (kernels/cpu/dash_pack.hpp) and awaits the stepped
// package; the actor moves it through the process's gpu_stream (one upload, the group steps,
// one download) without blocking any thread, and the bucket writes the result home. Spawned
// once per process by the launcher; local only (its messages never cross a process). This
// header needs no CUDA: where the build has none, spawn_dash_device refuses.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/expected.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <memory>

#include "kernels/cpu/dash_pack.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

using dash_job = std::shared_ptr<kernels::packed_dash_step>;

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::dash_job)

namespace troupe {

// run: one packed step -> the same package, stepped; errc::device_failure (or a timeout) when
// the GPU could not do it, and then the bucket steps on the CPU.
using dash_device_actor = caf::typed_actor<caf::replies_to<run_atom, dash_job>::with<dash_job>>;

struct dash_device_config {
  int device = 0;                            // the CUDA device
  std::chrono::seconds request_timeout{30};  // each request to the gpu_stream
  logger log{"dash-device"};
};

// Spawns the actor and the gpu_stream it drives; errc::device_failure where no GPU is visible
// or the build has no CUDA.
caf::expected<dash_device_actor> spawn_dash_device(caf::actor_system& sys,
                                                   dash_device_config config);

}  // namespace troupe
