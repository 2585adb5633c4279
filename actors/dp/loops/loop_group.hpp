// loop_group: the coordinator of a loop group, the processes whose own training loops reduce
// their gradients together (Python's troupe.DistributedOptimizer, through loop_member). It
// admits members (join), forms a generation once `min_members` have joined (ranks in join
// order, a token each, the generation's rendezvous store) and a new one whenever membership
// changes: a member joins, leaves (done), is lost (its actor goes down: its process ended or
// its node was lost), or a member's collective failed (broken) and no loss explains it within
// `settle`. The members then form their allreduce group again and agree on one state
// (allreduce_group's sync). Unlike a dp job's coordinator it owns no steps, examples or
// parameters: those are the loops'. An app node runs it (app_node::serve_group) and hands it
// out to nodes that proved the cluster secret.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/dp/collective/generation_store.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"
#include "troupe/loop_group.hpp"

namespace troupe {

struct loop_group_member {
  std::string name;
  loop_member_actor handle;
  std::string host;
  uint64_t token = 0;  // this generation's
  uint32_t rank = 0;   // this generation's
  bool live = true;
};

struct loop_group_state {
  static inline const char* name = "troupe.loop_group";
  std::vector<loop_group_member> members;  // in join order
  uint64_t generation = 0;                 // the newest formed (0: none yet)
  generation_store store;
};

loop_group_actor::behavior_type loop_group(
    loop_group_actor::stateful_pointer<loop_group_state> self, loop_group_config config);

}  // namespace troupe
