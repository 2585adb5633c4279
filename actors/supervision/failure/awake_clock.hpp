// Time that counts only while this process runs, for every watcher that judges another by its
// silence: the heartbeat monitor (coordinators watching members) and the actors collective's
// waits (dp members watching each other). A process that was stopped (SIGSTOP, a debugger),
// swapped out or stalled with its VM finds, when it runs again, that a long time has passed,
// while what its peers sent meanwhile still waits, unread, in its sockets and mailboxes. That
// time must not count as the peers' silence. So the clock advances by the time between two
// looks, but by at most `max_step` per look: a watcher that looks every `step` and counts at
// most two steps per look loses nothing while it runs, and a pause costs it two steps. Header
// only; one owner, not thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

namespace troupe {

class awake_clock {
 public:
  using clock = std::chrono::steady_clock;

  explicit awake_clock(clock::duration max_step) : max_step_(max_step) {}

  // The reading at `now`, without advancing.
  clock::duration at(clock::time_point now) const {
    if (!last_ || now <= *last_) return awake_;
    return awake_ + std::min(now - *last_, max_step_);
  }

  // Advances to `now`; returns the time since the last look that did not count (the time the
  // process was not running, give or take a step; zero when it looked on time).
  clock::duration advance(clock::time_point now) {
    const auto gap = last_ && now > *last_ ? now - *last_ : clock::duration{};
    awake_ = at(now);
    last_ = now;
    return gap > max_step_ ? gap - max_step_ : clock::duration{};
  }

  clock::duration reading() const { return awake_; }
  bool started() const { return last_.has_value(); }  // looked at least once

 private:
  clock::duration max_step_;
  clock::duration awake_{};
  std::optional<clock::time_point> last_;
};

// A deadline `budget` of awake time away: a wait that looks every step() and asks passed()
// times out only after `budget` of time that this process ran.
class awake_deadline {
 public:
  using clock = awake_clock::clock;

  explicit awake_deadline(clock::duration budget,
                          clock::duration step = std::chrono::milliseconds{100})
      : budget_(budget), step_(step), clock_(2 * step) {
    clock_.advance(clock::now());
  }

  bool passed() {
    clock_.advance(clock::now());
    return clock_.reading() >= budget_;
  }
  // How long to wait before the next look.
  clock::duration step() const { return std::min(step_, budget_ - clock_.reading()); }

 private:
  clock::duration budget_;
  clock::duration step_;
  awake_clock clock_;
};

}  // namespace troupe
