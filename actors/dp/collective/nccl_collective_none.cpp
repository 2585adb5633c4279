// The `nccl` backend in a build without CUDA or NCCL: there is no GPU to reduce on.
#include "actors/dp/collective/nccl_collective.hpp"

#include "troupe/error.hpp"

namespace troupe {

namespace {

caf::error not_built() {
  return make_error(errc::device_failure,
                    "this build has no CUDA and NCCL (configure with -DTROUPE_CUDA=ON where "
                    "both are installed): --collective nccl is not available");
}

}  // namespace

caf::expected<int> nccl_devices() {
  return not_built();
}

caf::expected<std::unique_ptr<collective>> make_nccl_collective(caf::actor_system&,
                                                                rendezvous_store&,
                                                                const nccl_options&) {
  return not_built();
}

}  // namespace troupe
