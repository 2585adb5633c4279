// loop_member: a process's membership in a loop group (loop_group.hpp), for plain code: the
// native side of Python's troupe.elastic and troupe.DistributedOptimizer. join() joins the
// group; generation() waits for a formed generation (its rank and size); reduce() sums a
// buffer over that generation's members; sync() has them agree on one state (the member with
// the most steps sends its own); leave() says goodbye (the destructor does too).
//
// Inside, a detached actor of its own answers the group (start: it forms its allreduce_group
// for that generation; stop) and runs the calls, which queue jobs for it, so nothing blocks
// the actor system's threads. A reduce or sync of a generation that is no longer the current
// one fails with errc::collective_failed, and so does one whose collective failed; the member
// then tells the group (broken), which forms a new generation. Every wait has a bound.
// Call it from any thread but the actor system's.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "actors/dp/allreduce_group.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

struct loop_generation {
  uint64_t generation = 0;
  uint32_t rank = 0;
  uint32_t size = 0;
};

class loop_member {
 public:
  // Joins `group` as `name` (host label `host`), the member's collectives listening on
  // `bind_host`; errc::timeout when the group does not answer within `timeout`.
  static caf::expected<std::unique_ptr<loop_member>> join(
      caf::actor_system& sys, const loop_group_actor& group, const std::string& name,
      const std::string& host, const std::string& bind_host, std::chrono::milliseconds timeout,
      const logger& log);
  ~loop_member();

  // The newest formed generation after `after` (0: any), waiting at most `bound` for it
  // (errc::timeout); errc::job_failed once the group stopped this member.
  caf::expected<loop_generation> generation(uint64_t after, std::chrono::milliseconds bound);

  // Sums `data` over the members of generation `g` in place. `owner` keeps the buffer alive
  // until the collective is done with it, even if the caller stops waiting.
  std::future<caf::expected<reduce_done>> reduce(uint64_t g, std::span<float> data, uint32_t tag,
                                                 std::shared_ptr<const void> owner);

  // The state every member of generation `g` goes on from: the one of the member with the
  // most `steps` (the lowest rank among equals); `state` is this member's.
  std::future<caf::expected<sync_result>> sync(uint64_t g, uint64_t steps, std::vector<char> state);

  // Leaves the group (it forms a new generation without this member).
  void leave();

  struct shared;

 private:
  explicit loop_member(std::shared_ptr<shared> s) : shared_(std::move(s)) {}
  std::shared_ptr<shared> shared_;
};

}  // namespace troupe
