// evaluator: runs training_task::evaluate on parameter snapshots for the coordinator. Spawn it
// detached: evaluation takes a while and must not hold a CAF scheduler thread. Local only
// (its messages never cross a process boundary), so its interface is not in protocol.hpp.
#pragma once

#include <memory>
#include <vector>

#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "messages/protocol.hpp"
#include "troupe/task.hpp"

namespace troupe {

using evaluator_actor =
    caf::typed_actor<caf::replies_to<eval_atom, std::vector<float>>::with<double, double>>;

evaluator_actor::behavior_type evaluator(evaluator_actor::pointer self,
                                         std::shared_ptr<const training_task> task);

}  // namespace troupe
