// evaluator: runs training_task::evaluate on parameter snapshots for the coordinator, and at
// the end the task's extra report figures. Spawn it detached: evaluation takes a while and
// must not hold a CAF scheduler thread. Local only (its messages never cross a process
// boundary), so its interface is not in protocol.hpp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "messages/protocol.hpp"
#include "troupe/task.hpp"

namespace troupe {

// One snapshot: the dense parameters and the embedding rows evaluation reads.
struct eval_input {
  std::vector<float> params;
  sparse_rows_view rows;
  bool figures = false;  // also compute the task's report figures (the last evaluation)
};

struct eval_output {
  evaluation result;
  std::vector<std::pair<std::string, double>> figures;
};

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const troupe::eval_input>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::eval_output)

namespace troupe {

using evaluator_actor = caf::typed_actor<
    caf::replies_to<eval_atom, std::shared_ptr<const eval_input>>::with<eval_output>>;

evaluator_actor::behavior_type evaluator(evaluator_actor::pointer self,
                                         std::shared_ptr<const training_task> task);

}  // namespace troupe
