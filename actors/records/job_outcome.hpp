// How a server or worker ends when the coordinator stops the job: normally when the job
// finished, with errc::job_failed (and so a non-zero process exit) when it failed.
#pragma once

#include <string>

#include <caf/error.hpp>
#include <caf/exit_reason.hpp>

#include "troupe/error.hpp"

namespace troupe {

inline caf::error job_outcome(const std::string& failure) {
  if (failure.empty()) return caf::exit_reason::normal;
  return make_error(errc::job_failed, "the coordinator ended the job: " + failure);
}

}  // namespace troupe
