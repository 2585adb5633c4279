// coordinator_link: which coordinator the members of one process answer to. The server, its
// buckets, a worker and the process's coordinator watch (heartbeat.hpp) share one link and read
// the coordinator from it at each use. When a standby takes over, the watch switches the link to
// the new term's coordinator and tells the subscribed members to rejoin it; from then on,
// messages from the deposed coordinator fail every member's sender check. Created by the
// launcher (actors/launch/launch.cpp), one per process; thread-safe, since members run on
// different threads. The link also holds the process's activity board (what its members are
// doing, sent with the heartbeats).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/supervision/failure/activity_board.hpp"
#include "messages/codec.hpp"
#include "messages/protocol.hpp"
#include "troupe/error.hpp"

namespace troupe {

class coordinator_link {
 public:
  explicit coordinator_link(coordinator_actor first, bool standby_listed = false,
                            std::shared_ptr<activity_board> activity = nullptr)
      : current_(std::move(first)),
        standby_listed_(standby_listed),
        activity_(activity ? std::move(activity) : std::make_shared<activity_board>()) {}

  // What the process's members are doing now (set by them, read by the watch).
  activity_board& activity() const { return *activity_; }

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
  std::shared_ptr<activity_board> activity_;
};

using coordinator_link_ptr = std::shared_ptr<coordinator_link>;

// Whether a request to the coordinator that failed with `err` may go again once the member has
// rejoined a standby that takes over: a standby is listed, and the coordinator went or did not
// answer (it did not refuse; not_rejoined is a standby's "not yet").
inline bool waits_for_standby(const coordinator_link& link, const caf::error& err) {
  return link.standby_listed() &&
         (err.category() != error_category || has_code(err, errc::not_rejoined));
}

// Asks the coordinator (through a `Coordinator` handle) where bucket b is now, its copy
// `failed` having not answered; a member's bucket_client finds buckets again with it. When the
// question fails it goes again: at once, of the coordinator that took over meanwhile (a request
// to a lost node only times out, so its failure may come back after the takeover), or, queued
// on the member's state.after_rejoin, once the member has rejoined the standby that takes over
// (a lane notices a lost server at once, so a server and the coordinator lost together leave
// the question with the lost one). Otherwise `found` gets the error.
template <class Coordinator, class Self>
void ask_where_bucket_is(Self self, coordinator_link_ptr link, std::chrono::milliseconds timeout,
                         size_t b, bucket_actor failed,
                         std::function<void(caf::expected<bucket_actor>)> found) {
  const auto asked = caf::actor_cast<Coordinator>(link->handle());
  self->request(asked, timeout, which_atom_v, static_cast<uint32_t>(b), failed)
      .then([=](bucket_actor& now) { found(std::move(now)); },
            [=](caf::error& err) {
              auto again = [=] {
                ask_where_bucket_is<Coordinator>(self, link, timeout, b, failed, found);
              };
              if (link->address() != asked.address()) return again();
              if (!waits_for_standby(*link, err)) return found(std::move(err));
              self->state.after_rejoin.push_back(again);
            });
}

// A link to `coordinator` that never switches (the coordinator's own process, tests); its
// members write on `activity` (the coordinator's own board, when it is in this process).
inline coordinator_link_ptr fixed_link(coordinator_actor coordinator,
                                       std::shared_ptr<activity_board> activity = nullptr) {
  return std::make_shared<coordinator_link>(std::move(coordinator), false, std::move(activity));
}

}  // namespace troupe
