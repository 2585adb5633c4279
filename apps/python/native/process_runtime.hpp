// The one actor system of a Python process, for what a user's own loop calls (ParameterService,
// ParameterClient): started on first use from TROUPE_* variables (TROUPE_TLS_DIR included) and
// the defaults of every Troupe binary, stopped by troupe's atexit hook before the interpreter
// finalises. A forked child (a DataLoader worker) never stops its parent's system. troupe.run
// still starts a system of its own for its job (run_app).
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "troupe/error.hpp"
#include "troupe/options.hpp"

namespace troupe::python {

// The system; a Python RuntimeError when the environment's options are malformed.
caf::actor_system& process_system();
// The options it was started with (process_system() first).
const launch_options& process_options();
// Stops it, when this process started it (nothing in a forked child, nothing if never started),
// within 10 s: CAF 0.17 can leave an ended detached actor never destroyed, and the system's
// destructor then waits for good (CAF issue 1196); past the bound the system is left as it is,
// with a line on stderr, and the process goes on exiting.
void stop_process_system();

// What must end before the system does: a service, a group, a member or a client that is still
// alive at exit would hold the system's shutdown for its whole bound, and end later, during
// the interpreter's finalisation, on a system already gone. stop_process_system() calls each
// `stop` first, once, with the GIL held; the hook goes with the returned token (keep it in the
// binding).
std::shared_ptr<void> before_stop(std::function<void()> stop);

// Waits for `ready()` with the GIL released, in slices, so that Ctrl-C is raised in Python
// (KeyboardInterrupt) while it waits; false when `bound` passed first.
bool wait_releasing_gil(const std::function<bool(std::chrono::milliseconds)>& ready,
                        std::chrono::milliseconds bound);

// Raises `err` in Python: TimeoutError, ValueError (bad shapes, non-finite values, bad
// configuration, malformed messages), PermissionError (authentication), RuntimeError otherwise.
[[noreturn]] void raise_error(const caf::error& err, const std::string& doing);

// A bound given in seconds from Python; ValueError unless positive.
std::chrono::milliseconds millis(double seconds, const char* what);

// A future's value, waited for as wait_releasing_gil() waits; TimeoutError after `bound`,
// the request's own error as raise_error() says (`doing` names it).
template <class T>
T wait_answer(std::future<caf::expected<T>>& f, std::chrono::milliseconds bound,
              const std::string& doing) {
  const bool ready = wait_releasing_gil(
      [&](std::chrono::milliseconds slice) {
        return f.wait_for(slice) == std::future_status::ready;
      },
      bound);
  if (!ready) raise_error(make_error(errc::timeout, "no answer within the bound"), doing);
  auto x = f.get();
  if (!x) raise_error(x.error(), doing);
  return std::move(*x);
}

}  // namespace troupe::python
