// coordinator_link: which coordinator the members of one process answer to. The server, its
// buckets, a worker and the process's coordinator watch (heartbeat.hpp) share one link and read
// the coordinator from it at each use. When a standby takes over, the watch switches the link to
// the new term's coordinator and tells the subscribed members to rejoin it; from then on,
// messages from the deposed coordinator fail every member's sender check. Created by the
// launcher (actors/job/launch.cpp), one per process; thread-safe, since members run on
// different threads.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "messages/codec.hpp"
#include "messages/protocol.hpp"
#include "troupe/error.hpp"

namespace troupe {

class coordinator_link {
 public:
  explicit coordinator_link(coordinator_actor first, bool standby_listed = false)
      : current_(std::move(first)), standby_listed_(standby_listed) {}

  coordinator_actor handle() const {
    std::lock_guard<std::mutex> guard{mutex_};
    return current_;
  }
  caf::actor_addr address() const { return handle().address(); }
  uint64_t term() const {
    std::lock_guard<std::mutex> guard{mutex_};
    return term_;
  }
  // Whether a standby may take over: the members were given more than one coordinator.
  bool standby_listed() const { return standby_listed_; }

  // Switches to `next`, a coordinator of term `term`; false (nothing changes) when the term is
  // older than the current one's, or the same with another coordinator (a deposed one, or
  // another job's first).
  bool switch_to(coordinator_actor next, uint64_t term) {
    std::lock_guard<std::mutex> guard{mutex_};
    if (term < term_ || (term == term_ && next != current_)) return false;
    current_ = std::move(next);
    term_ = term;
    return true;
  }

  // The answer to this process's join (a join_reply) names the joined coordinator's term.
  void joined(const wire& reply) {
    if (auto r = decode<join_reply>(reply)) switch_to(handle(), r->term);
  }

  // The coordinator said the job is over (a member's stop): its going down is no loss now.
  void close() {
    std::lock_guard<std::mutex> guard{mutex_};
    closed_ = true;
  }
  bool closed() const {
    std::lock_guard<std::mutex> guard{mutex_};
    return closed_;
  }

  // The member actors told (rejoin_atom) when the link switches or gives up.
  void subscribe(caf::actor_addr member) {
    std::lock_guard<std::mutex> guard{mutex_};
    subscribers_.push_back(std::move(member));
  }
  std::vector<caf::actor_addr> subscribers() const {
    std::lock_guard<std::mutex> guard{mutex_};
    return subscribers_;
  }

 private:
  mutable std::mutex mutex_;
  coordinator_actor current_;
  uint64_t term_ = 0;
  bool standby_listed_ = false;
  bool closed_ = false;
  std::vector<caf::actor_addr> subscribers_;
};

using coordinator_link_ptr = std::shared_ptr<coordinator_link>;

// After a request to coordinator `asked` failed with `err`, asks again: now, of the one that
// took over meanwhile (a request to a lost node only times out, and may come back after the
// takeover), or, queued on `after_rejoin`, once the member has rejoined a standby that takes
// over (the coordinator went, or did not answer). Otherwise (it refused, or no standby is
// listed) gives `err` up.
inline void ask_again(const coordinator_link& link, const caf::actor_addr& asked, caf::error err,
                      std::vector<std::function<void()>>& after_rejoin, std::function<void()> again,
                      const std::function<void(caf::error)>& give_up) {
  if (link.address() != asked) return again();
  const bool refused = err.category() == error_category && !has_code(err, errc::not_rejoined);
  if (!link.standby_listed() || refused) return give_up(std::move(err));
  after_rejoin.push_back(std::move(again));
}

// A link to `coordinator` that never switches (the coordinator's own process, tests).
inline coordinator_link_ptr fixed_link(coordinator_actor coordinator) {
  return std::make_shared<coordinator_link>(std::move(coordinator));
}

}  // namespace troupe
