#include "actors/launch/stop_signals.hpp"

#include <atomic>
#include <csignal>

namespace troupe::launch_detail {

namespace {

constexpr int handled[] = {SIGINT, SIGTERM};
std::atomic<int> first_received{0};  // lock-free: safe to store from a handler
struct sigaction previous[2];
bool installed[2] = {false, false};

// The first stop signal is noted, and both signals take their default action from then on
// (sigaction is async-signal-safe): a second one, of either kind, ends the process.
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  first_received.compare_exchange_strong(none, sig);
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  for (int i = 0; i < 2; ++i)
    if (installed[i]) ::sigaction(handled[i], &fallback, nullptr);
}

}  // namespace

stop_signals::stop_signals() {
  first_received = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESETHAND;  // the second one takes the default action
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 2; ++i) {
    ::sigaction(handled[i], nullptr, &previous[i]);
    installed[i] =
        previous[i].sa_handler != SIG_IGN && ::sigaction(handled[i], &action, nullptr) == 0;
  }
}

stop_signals::~stop_signals() {
  for (int i = 0; i < 2; ++i)
    if (installed[i]) ::sigaction(handled[i], &previous[i], nullptr);
}

int stop_signals::received() {
  return first_received.load();
}

const char* stop_signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace troupe::launch_detail
