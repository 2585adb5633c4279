// The bridge from a kernel's status (kernels/status.hpp, plain C++) to the caf::error an actor
// returns: the same code and sentence, in the "troupe" category. For any actor calling kernels.
#pragma once

#include <caf/error.hpp>

#include "kernels/status.hpp"
#include "troupe/error.hpp"

namespace troupe {

// An empty error for a status that is ok.
inline caf::error make_error(const kernels::status& done) {
  if (done.ok()) return {};
  return make_error(done.code, done.what);
}

}  // namespace troupe
