// What the tests' in-process jobs (dp_run.hpp, ps_run.hpp) share: waiting for a job's
// coordinator to end, within a bound. For tests only.
#pragma once

#include <caf/scoped_actor.hpp>

#include <chrono>

namespace troupe::testing {

// Waits (at most 300 s) for `coordinator` to end; whether it ended normally: the job finished.
template <class Handle>
bool await_job_end(caf::scoped_actor& self, const Handle& coordinator) {
  bool finished = false;
  self->monitor(coordinator);
  self->receive(
      [&](caf::down_msg& msg) { finished = !msg.reason || msg.reason == caf::exit_reason::normal; },
      caf::after(std::chrono::seconds(300)) >> [] {});
  return finished;
}

}  // namespace troupe::testing
