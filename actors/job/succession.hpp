// succession: what a coordinator of either kind keeps for its standby and for a takeover, and
// the follower handling both share: accepting a standby (follow), sending it the standing,
// learning from its answer that it has taken over (errc::deposed), forgetting it when it goes
// down, and letting it go at the end of the job. Called from the handlers of the parameter
// service's coordinator (actors/ps/standing.cpp) and the data-parallel one
// (actors/dp/plan/dp_standing.cpp); `Self` is a stateful actor pointer whose state has a
// `succession_state succession`.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/send.hpp>
#include <caf/typed_response_promise.hpp>

#include "messages/codec.hpp"
#include "messages/protocol.hpp"
#include "troupe/error.hpp"
#include "troupe/log.hpp"

namespace troupe {

// The coordinator's term, the standby following it, and, while it takes over from a lost
// primary, the members yet to rejoin.
struct succession_state {
  uint64_t term = 0;
  standby_actor follower;  // none: no standby follows this coordinator
  // Whether the follower has accepted this coordinator's state since this process's last pause
  // (a paused primary may have been deposed meanwhile: it judges nobody until it knows).
  bool confirmed = true;
  // When the newest standing it took was sent, and whether it ever took one of a job in
  // training (before that it cannot have taken over).
  std::chrono::steady_clock::time_point confirmed_at;
  bool took_training = false;
  bool told_unreachable = false;  // the follower's silence was logged
  // The job's end (its failure, or its finish) that came while the standing was overdue: it
  // waits until the follower takes a standing again, or is gone in time.
  std::optional<std::string> deferred_failure;
  bool deferred_finish = false;
  // Taking over:
  bool rejoining = false;
  std::chrono::steady_clock::time_point lost_at;   // when the old primary was judged lost
  double lost_at_s = 0;                            // the same, in training seconds
  std::chrono::steady_clock::time_point deadline;  // members not back by then are lost
  // Members' down messages that came while the standing was overdue (below), held until the
  // follower takes a standing again or is gone.
  std::vector<caf::down_msg> held_downs;
};

// The most down messages held (a job has no more members than this).
constexpr size_t max_held_downs = size_t{1} << 16;

// Whether the follower has taken no standing sent within the last `timeout`
// (--takeover-timeout-ms) although it has one of a job in training: it may have judged this
// coordinator lost and taken over (after a pause of this process).
inline bool standing_overdue(const succession_state& heir, std::chrono::milliseconds timeout) {
  return heir.follower && heir.took_training &&
         std::chrono::steady_clock::now() - heir.confirmed_at > timeout;
}

// The job's end while the standing is overdue waits (true): `failure` (none: the finish) is
// kept for take_deferred_end.
inline bool defer_end_while_overdue(succession_state& heir, std::chrono::milliseconds timeout,
                                    std::optional<std::string> failure) {
  if (!standing_overdue(heir, timeout)) return false;
  if (failure && !heir.deferred_failure) heir.deferred_failure = std::move(failure);
  if (!failure) heir.deferred_finish = true;
  return true;
}

// From the tick: an end that waited and may go on now. `fail(why)` or `finish()` is called.
template <class Fail, class Finish>
void take_deferred_end(succession_state& heir, std::chrono::milliseconds timeout, Fail fail,
                       Finish finish) {
  if (standing_overdue(heir, timeout)) return;
  if (auto why = std::exchange(heir.deferred_failure, std::nullopt)) return fail(*why);
  if (std::exchange(heir.deferred_finish, false)) finish();
}

// A member's down message while the standing is overdue is not this coordinator's to judge yet
// (the members may have gone to a standby that took over): true when it is held.
template <class Self>
bool hold_down_while_overdue(Self self, const caf::down_msg& msg,
                             std::chrono::milliseconds timeout) {
  auto& heir = self->state.shell.succession;
  if (!standing_overdue(heir, timeout) || heir.held_downs.size() >= max_held_downs) return false;
  heir.held_downs.push_back(msg);
  return true;
}

// The held down messages go to the down handler again.
template <class Self>
void release_held_downs(Self self) {
  auto held = std::move(self->state.shell.succession.held_downs);
  self->state.shell.succession.held_downs.clear();
  for (auto& msg : held) caf::anon_send(caf::actor_cast<caf::actor>(self), std::move(msg));
}

// follow: `standby` follows this coordinator from now on (it replaces any before it); `send`
// sends it the first standing. Returns the term, the follow request's answer.
template <class Self, class Send>
uint64_t accept_follower(Self self, standby_actor standby, const logger& log, Send send) {
  auto& heir = self->state.shell.succession;
  if (heir.follower) log.warn("a new standby replaces the one that followed us");
  log.info("a standby coordinator follows us (term {})", heir.term);
  self->monitor(standby);
  heir.follower = std::move(standby);
  heir.confirmed = true;
  heir.confirmed_at = std::chrono::steady_clock::now();
  heir.took_training = false;
  send();
  return heir.term;
}

// Sends `standing` (of a job in training or not) to the follower, if any: `confirmed()` once it
// took it; `deposed(err)` when it answers that it has taken over (the caller must stop without
// touching the job).
template <class Self, class Confirmed, class Deposed>
void offer_standing(Self self, std::chrono::milliseconds timeout, wire standing, bool training,
                    const logger& log, Confirmed confirmed, Deposed deposed) {
  const auto follower = self->state.shell.succession.follower;
  if (!follower) return;
  const auto sent = std::chrono::steady_clock::now();  // an answer may wait out a pause
  self->request(follower, timeout, state_atom_v, self->state.shell.succession.term,
                std::move(standing))
      .then(
          [=](bool) {
            auto& heir = self->state.shell.succession;
            heir.confirmed = true;
            heir.confirmed_at = std::max(heir.confirmed_at, sent);
            heir.took_training = heir.took_training || training;
            heir.told_unreachable = false;
            release_held_downs(self);
            confirmed();
          },
          [=](caf::error& err) {
            auto& heir = self->state.shell.succession;
            if (has_code(err, errc::deposed)) {
              log.error("{}; stopping without touching the job", describe(err));
              return deposed(std::move(err));
            }
            if (!heir.told_unreachable && heir.follower == follower)
              log.warn("the standby did not take our state: {}", describe(err));
            heir.told_unreachable = true;
          });
}

// A down message: whether it is the follower's. Then it is forgotten and the job goes on,
// unless the standing was overdue: the standby may have taken over and ended since, so
// `deposed(err)` is called (the caller must stop without touching the job).
template <class Self, class Deposed>
bool forget_follower(Self self, const caf::down_msg& msg, std::chrono::milliseconds timeout,
                     const logger& log, Deposed deposed) {
  auto& heir = self->state.shell.succession;
  if (!heir.follower || msg.source != heir.follower.address()) return false;
  const bool overdue = standing_overdue(heir, timeout);
  heir.follower = standby_actor{};
  heir.confirmed = true;
  if (overdue) {
    log.error(
        "the standby is gone ({}) and took no state from us for {} ms: it may have taken "
        "over; stopping without touching the job",
        describe(msg.reason), timeout.count());
    deposed(make_error(errc::deposed, "the standby may have taken over"));
    return true;
  }
  log.warn("the standby coordinator is gone ({}); going on without one", describe(msg.reason));
  release_held_downs(self);
  return true;
}

// The job is over (`failure`: why, or empty): the follower stops with it.
template <class Self>
void release_follower(Self self, const std::string& failure) {
  auto& heir = self->state.shell.succession;
  if (!heir.follower) return;
  self->send(heir.follower, stop_atom_v, failure);
  heir.follower = standby_actor{};
}

}  // namespace troupe
