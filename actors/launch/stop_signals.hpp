// Ctrl-C (SIGINT) and SIGTERM while run_app waits for a node's root actor: the first asks that
// actor to stop (the job, or this member, ends as an interrupted one: exit code 128 + the
// signal), a second ends the process at once (the default action). Held by launch_detail's
// wait_for only: outside it, the signals keep whatever action the process gave them, and one
// the process ignores (nohup, a background job) stays ignored.
#pragma once

namespace troupe::launch_detail {

class stop_signals {
 public:
  stop_signals();
  ~stop_signals();
  stop_signals(const stop_signals&) = delete;
  stop_signals& operator=(const stop_signals&) = delete;

  // The first stop signal received while held (0: none yet).
  static int received();
};

// "SIGINT", "SIGTERM" or the number.
const char* stop_signal_name(int sig);

}  // namespace troupe::launch_detail
