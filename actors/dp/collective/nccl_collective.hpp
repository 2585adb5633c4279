// The `nccl` backend: NCCL's collectives on this member's GPU, through a gpu_stream actor
// (actors/gpu) that owns the device, its streams and the device buffers. The values a call
// gets live on the host (the trainers compute on the CPU): each call uploads them, runs the
// NCCL operation on the stream actor's compute stream and downloads the result, so it pays
// two PCIe copies and wins where NCCL's links (NVLink, or several GPUs of a host) are faster
// than TCP. Member 0 makes the NCCL unique id and puts it in the rendezvous store under
// `prefix`; the others read it there. The communicator is non-blocking, so every wait (its
// setup, each operation) has the call's bound: past it the communicator is aborted (which
// ends NCCL kernels waiting on a lost peer) and the object is spoiled, as for the other
// backends; the other members find out at their own deadline. A healthy one is finalised
// (its last sends flushed) when destroyed. NCCL needs a GPU of its own per member. One call
// moves at most 256 MiB; allreduce and broadcast go in pieces of that.
// Built with CUDA and NCCL (nccl_collective.cpp in actors/gpu); otherwise every call refuses
// with errc::device_failure (nccl_collective_none.cpp). Used from one thread at a time, the
// allreduce_group's.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "actors/dp/collective/collective.hpp"
#include "actors/dp/collective/rendezvous_store.hpp"

namespace troupe {

struct nccl_options {
  uint32_t rank = 0;
  uint32_t size = 1;
  // This member's place among the members of its host: it uses GPU local_rank % the GPUs
  // this process sees (one GPU per process under CUDA_VISIBLE_DEVICES, or one of all).
  int local_rank = 0;
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
