// activity_board: what each member of one process is doing now and what it waits on (a step,
// a pull, a collective, the user's code), for the stall watchdog's report (stall_watch.hpp).
// A member writes its record as it goes; the process's coordinator watch sends the records with
// its heartbeats, and a coordinator reads those of its own process directly. A member stuck in
// the user's code cannot answer a question, which is why its last record is kept here, not
// asked for. One per process, held by the process's coordinator_link; thread-safe, since
// members run on different threads. A record costs a lock and two short string copies.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "messages/types.hpp"

namespace troupe {

class activity_board {
 public:
  using clock = std::chrono::steady_clock;

  // `member` is now doing `doing` (e.g. "step 31") and waits on `waiting_on` (e.g. "user
  // code: gradient"); the time it started is kept only when either changed.
  void set(const std::string& member, std::string doing, std::string waiting_on) {
    std::lock_guard<std::mutex> guard{mutex_};
    auto& r = records_[member];
    if (r.doing == doing && r.waiting_on == waiting_on) return;
    r.doing = std::move(doing);
    r.waiting_on = std::move(waiting_on);
    r.since = clock::now();
  }

  // `member` ended: its record goes.
  void forget(const std::string& member) {
    std::lock_guard<std::mutex> guard{mutex_};
    records_.erase(member);
  }

  // Every member's record, with the seconds since it started.
  std::vector<member_activity> snapshot() const {
    const auto now = clock::now();
    std::lock_guard<std::mutex> guard{mutex_};
    std::vector<member_activity> out;
    out.reserve(records_.size());
    for (const auto& [name, r] : records_)
      out.push_back(member_activity{name, r.doing, r.waiting_on,
                                    std::chrono::duration<double>(now - r.since).count()});
    return out;
  }

 private:
  struct record {
    std::string doing, waiting_on;
    clock::time_point since;
  };
  mutable std::mutex mutex_;
  std::map<std::string, record> records_;
};

}  // namespace troupe
