// The coordinator's functions shared between its source files (coordinator.cpp,
// membership.cpp, placement.cpp, checkpointing.cpp, inspection.cpp). Internal to the
// coordinator: nothing else may call them.
#pragma once

#include <string>

#include "actors/coordinator.hpp"

namespace troupe::coordination {

using self_ptr = coordinator_actor::stateful_pointer<coordinator_state>;

double seconds_since(std::chrono::steady_clock::time_point t);

// -- coordinator.cpp
void fail(self_ptr self, const coordinator_config& config, std::string why);
void maybe_evaluate(self_ptr self, const coordinator_config& config);
void start_training(self_ptr self, const coordinator_config& config);
// Starts worker `rank` at the clock every bucket agrees on (a late joiner, a resumed job).
void start_at_slowest(self_ptr self, const coordinator_config& config, uint32_t rank);
void retire_everywhere(self_ptr self, uint32_t rank);
// Gives up batches nobody is left to do, then evaluates what can be.
void settle_work(self_ptr self, const coordinator_config& config);

// -- membership.cpp
caf::result<wire> admit_server(self_ptr self, const coordinator_config& config, const wire& w,
                               server_actor handle);
caf::result<wire> admit_worker(self_ptr self, const coordinator_config& config, const wire& w,
                               worker_actor handle);
void on_down(self_ptr self, const coordinator_config& config, const caf::down_msg& msg);
void on_heartbeat(self_ptr self, const wire& w);
void check_heartbeats(self_ptr self, const coordinator_config& config);
double live_workers(const coordinator_state& st);
void record_loss(coordinator_state& st, const member& m, role kind, const std::string& why);

// -- placement.cpp
void place_buckets(self_ptr self, const coordinator_config& config);
void place_all(self_ptr self, const coordinator_config& config);
// Server `s` is gone: its primaries' backups take over (or the job fails without them).
void lose_server(self_ptr self, const coordinator_config& config, size_t s, const std::string& why);
caf::result<bucket_actor> which(self_ptr self, uint32_t bucket, const bucket_actor& failed);
void moved(self_ptr self, const coordinator_config& config, uint32_t bucket, bucket_actor handle);
caf::expected<std::string> inject_fault(self_ptr self, const std::string& name);

// -- inspection.cpp
// The console's views of the job: "nodes", "workers" or "buckets" as a table_view.
caf::result<wire> inspect(self_ptr self, const coordinator_config& config, const std::string& view);

// -- checkpointing.cpp
// Reads the newest good checkpoint of --resume; says which newer ones it skipped and why.
caf::error load_resume(self_ptr self, const coordinator_config& config);
// Whether the checkpoint resumed from fits this job; a clear error when it does not.
caf::error check_resume(const coordinator_state& st, const coordinator_config& config);
// Starts the workers of a resumed job from the checkpoint's progress.
void start_resumed(self_ptr self, const coordinator_config& config);
// Counts finished batches and takes a checkpoint when --checkpoint-every is reached.
void count_for_checkpoint(self_ptr self, const coordinator_config& config, uint64_t batches);

}  // namespace troupe::coordination
