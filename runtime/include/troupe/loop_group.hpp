// Loop groups for plain code: processes that bring their own training loop and sum their
// gradients together (Python's troupe.DistributedOptimizer and troupe.elastic stand on this).
// One process spawns the group's coordinator (spawn_loop_group) and serves it from its app
// node (app_node::serve_group); every member process joins that node (app_node::join) and then
// the group (loop_member::join). The group forms a generation (ranks, size) once min_members
// have joined, and a new one whenever membership changes: a member joins, leaves, is lost, or
// its collective failed. A member reduces buffers over the current generation's members and,
// after a change, has them agree on one state (the member with the most steps sends its own).
//
// Inside, a member's detached actor answers the group and runs the calls, which queue jobs for
// it, so nothing blocks the actor system's threads. A reduce or sync of a generation that is no
// longer the current one fails with errc::collective_failed, and so does one whose collective
// failed; the member then tells the group, which forms a new generation. Every wait has a
// bound. Call it from main() or any thread but the actor system's.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "troupe/log.hpp"
#include "troupe/values.hpp"

namespace troupe {

struct loop_group_config {
  uint32_t min_members = 1;  // members before the first generation forms
  collective_kind collective = collective_kind::gloo;
  std::chrono::milliseconds timeout{30000};  // each collective, and forming a generation
  std::chrono::milliseconds settle{1000};    // a broken collective waits this for a loss
  logger log{"loop-group"};
};

// The coordinator of a new loop group; serve it with app_node::serve_group.
caf::actor spawn_loop_group(caf::actor_system& sys, const loop_group_config& config);

struct loop_generation {
  uint64_t generation = 0;
  uint32_t rank = 0;
  uint32_t size = 0;
};

// A finished reduction (also what a dp job's allreduce group answers).
struct reduce_done {
  double seconds = 0;             // in the collective
  uint64_t bytes = 0;             // this member sent
  uint64_t bytes_inter_host = 0;  // of those, to members on other hosts
};

// The state the members of a generation agreed on.
struct sync_result {
  uint64_t steps = 0;       // the source's
  uint32_t source = 0;      // its rank
  bool taken = false;       // this member took the source's state (it was behind)
  std::vector<char> state;  // what it took (empty when it kept its own)
};

class loop_member {
 public:
  // Joins the loop group served as `group` by the app node `node` (app_node::join), as `name`
  // (host label `host`), the member's collectives listening on `bind_host`.
  // errc::bad_configuration when the node serves no such group, errc::timeout when the node or
  // the group does not answer within `timeout`.
  static caf::expected<std::unique_ptr<loop_member>> join(
      caf::actor_system& sys, const caf::actor& node, const std::string& group,
      const std::string& name, const std::string& host, const std::string& bind_host,
      std::chrono::milliseconds timeout, const logger& log);
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
