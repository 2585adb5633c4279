// The dp coordinator's functions, shared by its files: dp_coordinator.cpp (forming groups,
// membership, steps, evaluation, the end), dp_store.cpp (the rendezvous store),
// dp_checkpoints.cpp (checkpoints and --resume) and dp_inspection.cpp (the console's views and
// the metrics). Internal to actors/; called only from the dp coordinator's handlers.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "actors/dp/dp_coordinator.hpp"
#include "actors/job/timing.hpp"

namespace troupe::dp_coordination {

using self_ptr = dp_coordinator_actor::stateful_pointer<dp_coordinator_state>;

size_t live_count(const dp_coordinator_state& st);
// The member that sent the message being handled, if it is one.
dp_member* sender(self_ptr self);
// A member declared lost that speaks again is told to stop, once.
void refuse(self_ptr self, const dp_coordinator_config& config, dp_member& m);
// Writes the report with `why` and stops everyone.
void fail(self_ptr self, const dp_coordinator_config& config, const std::string& why);

// -- dp_store.cpp
caf::result<bool> store_put(self_ptr self, const wire& w);
caf::result<wire> store_get(self_ptr self, const wire& w);

// -- dp_checkpoints.cpp
caf::error take_resume(dp_coordinator_state& st, const dp_coordinator_config& config);
void on_save(self_ptr self, const dp_coordinator_config& config, uint64_t step, uint32_t index,
             uint32_t count, const wire& part);

// -- dp_tables.cpp (--mode hybrid)
// Pulls the rows evaluation reads from the table buckets into input->rows, then `then`; a
// bucket that does not answer fails the job.
void pull_evaluation_rows(self_ptr self, const dp_coordinator_config& config,
                          std::shared_ptr<eval_input> input, std::function<void()> then);
// Adds the table buckets' statistics (updates, staleness) to the report, then `then`.
void gather_table_stats(self_ptr self, const dp_coordinator_config& config,
                        std::function<void()> then);

// -- dp_inspection.cpp
// The console's views of a dp job: "group", "tree", "nodes", "metrics".
caf::result<wire> inspect(self_ptr self, const dp_coordinator_config& config,
                          const std::string& view);

}  // namespace troupe::dp_coordination
