// spawn_dash_device in a build without CUDA: there is no GPU to step DASH on.
#include "actors/bucket/dash_device.hpp"

#include "troupe/error.hpp"

namespace troupe {

caf::expected<dash_device_actor> spawn_dash_device(caf::actor_system&, dash_device_config) {
  return make_error(errc::device_failure,
                    "this build has no CUDA (configure with -DTROUPE_CUDA=ON): --dash-device gpu "
                    "is not available");
}

}  // namespace troupe
