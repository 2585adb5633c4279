// The `nccl` backend: NCCL's collectives on this member's GPU, through a gpu_stream actor
// (actors/gpu) that owns the device, its streams and the device buffers. The values a call
// gets live on the host (the trainers compute on the CPU): each call uploads them, runs the
// NCCL operation on the stream actor's compute stream and downloads the result, so it pays
// two PCIe copies and wins where NCCL's links (NVLink, or several GPUs of a host) are faster
// than TCP. Member 0 makes the NCCL unique id and puts it in the rendezvous store under
// `prefix`; the others read it there. The communicator is non-blocking, so every wait (its
// setup, each operation) has the call's bound: past it the communicator is aborted (which
// ends NCCL kernels waiting on a lost peer) and the object is spoiled, as for the other
// backends. NCCL needs a GPU of its own per member: `device` is this member's.
// Built with CUDA and NCCL (nccl_collective.cpp in actors/gpu); otherwise every call refuses
// with errc::device_failure (nccl_collective_none.cpp). Used from one thread at a time, the
// allreduce_group's.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "actors/collective/collective.hpp"
#include "actors/collective/rendezvous_store.hpp"

namespace troupe {

struct nccl_options {
  uint32_t rank = 0;
  uint32_t size = 1;
  int device = 0;      // the GPU of this process that this member uses
  std::string prefix;  // the store's keys of this group
  std::chrono::milliseconds timeout{30000};
};

// How many GPUs NCCL can use here, or errc::device_failure saying why none (no CUDA or NCCL
// in this build, no GPU visible).
caf::expected<int> nccl_devices();

caf::expected<std::unique_ptr<collective>> make_nccl_collective(caf::actor_system& sys,
                                                                rendezvous_store& store,
                                                                const nccl_options& options);

}  // namespace troupe
