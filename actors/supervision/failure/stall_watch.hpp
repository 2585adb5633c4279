// stall_watch: the stall watchdog of the coordinator that counts a job's progress
// (--stall-timeout S; ps's coordinator, dp's, and in hybrid the group's). Its owner calls
// progress() when the job moves (ps: a batch handed out, a push acknowledged, an evaluation
// done; dp and hybrid: a step applied, an evaluation done, a generation formed), step_took()
// with each step's time, and check() every tick. While the owner is busy with what may take
// long on purpose (start-up, a checkpoint write, an evaluation) it passes busy: that counts as
// progress when it ends. The bound is max(S, 10 x the slowest step seen); time counts only
// while the owner's process runs (awake_clock.hpp), so a coordinator that was paused does not
// judge the job for it. One owner; not thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "actors/supervision/failure/activity_board.hpp"
#include "actors/supervision/failure/awake_clock.hpp"
#include "messages/types.hpp"

namespace troupe {

class stall_watch {
 public:
  using clock = std::chrono::steady_clock;

  // `limit` 0: off. `tick`: how often check() is called.
  stall_watch(std::chrono::seconds limit = std::chrono::seconds{0},
              std::chrono::milliseconds tick = std::chrono::milliseconds{500})
      : limit_(limit), awake_(2 * tick) {}

  bool on() const { return limit_.count() > 0; }

  void progress(clock::time_point now) { last_ = awake_.at(now); }

  // A step's time in seconds: what it computed and waited on its collectives, not pauses
  // (a checkpoint, a takeover), which would raise the bound for good.
  void step_took(double seconds) {
    if (seconds > 0 && seconds < 1e6)
      slowest_ = std::max(slowest_, std::chrono::duration_cast<clock::duration>(
                                        std::chrono::duration<double>(seconds)));
  }

  clock::duration bound() const { return std::max<clock::duration>(limit_, 10 * slowest_); }

  // How long nothing moved, once that is past the bound; none while off, busy, or moving.
  std::optional<clock::duration> check(clock::time_point now, bool busy) {
    awake_.advance(now);
    if (!on()) return std::nullopt;
    if (busy || !last_) {
      last_ = awake_.reading();
      return std::nullopt;
    }
    const auto quiet = awake_.reading() - *last_;
    if (quiet <= bound()) return std::nullopt;
    return quiet;
  }

 private:
  clock::duration limit_;
  clock::duration slowest_{};
  awake_clock awake_;
  std::optional<clock::duration> last_;  // awake time of the last progress
};

// A process's member records as its last heartbeat brought them, and when it came.
struct heard_activity {
  std::vector<member_activity> records;
  stall_watch::clock::time_point at;
};

// Each member's last activity, for the stall report: those on `local` (the coordinator's own
// process; may be null) and those heard with heartbeats, aged by the time since they came.
std::vector<member_activity> last_activity(const activity_board* local,
                                           const std::vector<heard_activity>& heard,
                                           stall_watch::clock::time_point now);

// "; worker-0: step 31, waiting on user code: gradient for 605 s" for each member.
std::string describe_activity(const std::vector<member_activity>& members);

// A coordinator's tick of the watchdog: when `watch` finds the job stalled, `report` gets
// status stalled and each member's last activity (from `local` and `heard`, as
// last_activity), and the reason the job ends with is returned; none otherwise.
std::optional<std::string> judge_stall(stall_watch& watch, bool busy, const activity_board* local,
                                       const std::vector<heard_activity>& heard,
                                       job_report& report);

}  // namespace troupe
