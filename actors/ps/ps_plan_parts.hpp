// The parameter service plan's functions shared between its source files (ps_plan.cpp,
// membership.cpp, placement.cpp, replicas.cpp, checkpointing.cpp, inspection.cpp). Internal to
// the plan: called by its own files, the coordinator (actors/coordinator) and, for --mode
// hybrid's tables, the dp plan (actors/dp/plan/dp_tables.cpp).
#pragma once

#include <optional>
#include <string>

#include "actors/ps/ps_plan.hpp"
#include "actors/records/timing.hpp"

namespace troupe::ps_plan {

using self_ptr = coordinator_self;

// which() requests held per bucket (and tables requests held); more means someone asks in a
// loop.
constexpr size_t max_waiting = 1024;

// -- ps_plan.cpp
// The batches of one chunk of work: --accumulate's (one push) in ps, --sync-every's (a round of
// local steps) in diloco.
uint32_t chunk_of(const launch_options& o);
void maybe_evaluate(self_ptr self, const job_config& config);
void start_training(self_ptr self, const job_config& config);
// Starts worker `rank` at the clock every bucket agrees on (a late joiner, a resumed job).
void start_at_slowest(self_ptr self, const job_config& config, uint32_t rank);
void retire_everywhere(self_ptr self, uint32_t rank);
// Gives up batches nobody is left to do, then evaluates what can be.
void settle_work(self_ptr self, const job_config& config);
// A worker's progress_batch: chunks finished, their losses and clocks.
void on_progress(self_ptr self, const job_config& config, const wire& w);
// Worker `rank` claims up to `most` chunks of batches: a work_lease.
caf::result<wire> claim(self_ptr self, uint32_t rank, uint32_t most);
// Worker `rank` has done every batch it will get.
void on_done(self_ptr self, const job_config& config, uint32_t rank);

// -- tables.cpp (--mode hybrid)
void tables_placed(self_ptr self, const job_config& config);
// An app service's `tables` request: the buckets and the servers' HOST:PORT list, held until
// they are ready (tables_ready); hand_tables answers the held ones, and tells the coordinator
// (on_tables_ready: --mode hybrid's dp plan).
caf::result<std::vector<bucket_actor>, std::string> want_tables(self_ptr self,
                                                                const job_config& config);
void hand_tables(self_ptr self);
// An app service's owner says the service is over ("" or why it failed).
void stop_service(self_ptr self, const job_config& config, const std::string& failure);
// Whether the buckets may be handed out: placed, no takeover under way, and a primary for
// every bucket (after a takeover, a promotion may still be finding one).
bool tables_ready(const coordinator_state& st);
// The live servers' data endpoints (to_server_list: "HOST:PORT[/LANE],..."), for the members
// to connect to, over their data lanes where the servers have them.
std::string server_list(const coordinator_state& st);

// -- membership.cpp
caf::result<wire> admit_server(self_ptr self, const job_config& config, const wire& w,
                               server_actor handle);
caf::result<wire> admit_worker(self_ptr self, const job_config& config, const wire& w,
                               worker_actor handle);
void on_down(self_ptr self, const job_config& config, const caf::down_msg& msg);
void lose_worker(self_ptr self, const job_config& config, size_t i, const std::string& why);
// Counts a finished chunk's batches and summed loss into its epoch's train loss (a loss that is
// not finite, of a skipped chunk, as the epoch's mean so far).
void add_chunk_loss(coordinator_state& st, const work_chunk& chunk, double loss_sum);
double live_workers(const coordinator_state& st);
// Whether a drain is under way (checkpoints and other drains wait for it).
bool anyone_draining(const coordinator_state& st);
void record_loss(coordinator_state& st, const member& m, role kind, const std::string& why);
// Seconds of training so far (a resumed job's included; 0 before training).
double training_seconds(const coordinator_state& st);

// -- placement.cpp
void place_buckets(self_ptr self, const job_config& config);
void place_all(self_ptr self, const job_config& config);
// The layout, the bucket plan over the servers that joined, and each bucket's spec as kept
// (shapes only, or the checkpoint's resumed from); with `new_values` (a new job, not a
// takeover), the task's initial values, which each bucket's spec carries when it is placed.
caf::error lay_out_buckets(self_ptr self, const job_config& config, bool new_values);
// Server `s` is gone: its primaries' backups take over (or the job fails without them).
void lose_server(self_ptr self, const job_config& config, size_t s, const std::string& why);
caf::result<bucket_actor> which(self_ptr self, uint32_t bucket, const bucket_actor& failed);
void moved(self_ptr self, const job_config& config, uint32_t bucket, bucket_actor handle);
caf::expected<std::string> inject_fault(self_ptr self, const std::string& name);
// Server s leaves cleanly (drained): its buckets' copies take over, and it stops.
void hand_over_server(self_ptr self, const job_config& config, size_t s);
// Bucket b is served by `handle` on server s from now on; held which() requests get it.
void set_primary(self_ptr self, uint32_t b, bucket_actor handle, uint32_t s);
// Bucket b has a live primary again after a server loss.
void served_again(self_ptr self, const job_config& config, uint32_t b);

// Asks server `s` to host a bucket from `spec`, then calls on_hosted.
template <class OnHosted, class OnError>
void host_spec(self_ptr self, const job_config& config, wire spec, uint32_t s, OnHosted on_hosted,
               OnError on_error) {
  self->request(self->state.ps->roster.servers[s], config.opts.request_timeout, host_atom_v,
                std::move(spec))
      .then(on_hosted, on_error);
}

// Asks server `s` to host bucket b from its spec as placed (shapes only for a job's own
// buckets: the caller gives it its state), then calls on_hosted.
template <class OnHosted, class OnError>
void host_bucket(self_ptr self, const job_config& config, uint32_t b, uint32_t s,
                 OnHosted on_hosted, OnError on_error) {
  host_spec(self, config, self->state.ps->directory.specs[b], s, on_hosted, on_error);
}

// -- replicas.cpp
// The live server, not being drained, that holds no copy of bucket b and the fewest copies.
std::optional<uint32_t> server_for_copy(const coordinator_state& st, uint32_t b);
// Makes a copy of bucket b at the end of its chain, on a live server that is not being drained
// and holds no copy of it; `then` runs once it holds the state (or when none can be made).
void add_backup(self_ptr self, const job_config& config, uint32_t b, std::function<void()> then);
// Adds backups until bucket b has --replication copies (or no server is left for one), then
// runs `then`.
void fill_chain(
    self_ptr self, const job_config& config, uint32_t b, std::function<void()> then = [] {});
// Server s is gone: the first live backup of each of its primaries takes over, its backups
// leave their chains, and every chain grows back to --replication copies.
void take_over_from(self_ptr self, const job_config& config, size_t s, const std::string& what);
// A copy of bucket b reports that `failed`, the copy after it, does not answer: unless the
// chain has changed since, `failed` leaves it and the reporter forwards past it.
void backup_failed(self_ptr self, const job_config& config, uint32_t b,
                   const bucket_actor& reporter, const bucket_actor& failed);
// The copy at chain position k of bucket b (0: the primary) was restarted by its server's
// supervisor: it is linked to the copies after and before it again.
void relink_restarted(self_ptr self, const job_config& config, uint32_t b, size_t k);

// -- takeover.cpp
// Starts this coordinator from config.takeover: the old primary's state, its members to rejoin.
void take_over(self_ptr self, const job_config& config);
caf::result<wire> rejoin_server(self_ptr self, const job_config& config, const wire& w,
                                server_actor handle, std::vector<bucket_actor> buckets);
caf::result<wire> rejoin_worker(self_ptr self, const job_config& config, const wire& w,
                                worker_actor handle);

// -- inspection.cpp
std::string state_of(const member& m);

// -- diagnostics.cpp
// Every bucket's statistics (none for a bucket that did not answer), in bucket order.
void gather_stats(self_ptr self, const job_config& config,
                  std::function<void(std::vector<std::optional<bucket_stats>>)> done);
// The diagnostics table: update variance, loss oscillation, effective update ratio.
table_view diagnose(const coordinator_state& st, const diag_thresholds& warn,
                    const std::vector<std::optional<bucket_stats>>& stats);
// -- operations.cpp
// Drains the live server or worker `name` (the console's `drain`).
caf::result<std::string> drain(self_ptr self, const job_config& config, const std::string& name);

// -- checkpointing.cpp
// The job's progress as a checkpoint holds it: the work plan, the losses, the evaluations.
job_checkpoint job_progress(const coordinator_state& st);
// Whether the checkpoint resumed from fits this job; a clear error when it does not.
caf::error check_resume(const coordinator_state& st, const job_config& config);
// Starts the workers of a resumed job from the checkpoint's progress.
void start_resumed(self_ptr self, const job_config& config);
// Counts finished batches and takes a checkpoint when --checkpoint-every is reached.
void count_for_checkpoint(self_ptr self, const job_config& config, uint64_t batches);
// Pauses the workers, saves every bucket, writes the file; tells checkpoint_waiters.
void take_checkpoint(self_ptr self, const job_config& config);
// Adds part `index` and the rest of bucket b, then of every later bucket, to `file` as each
// comes (bucket b as the file's bucket first + b); done(error or none) after the last.
void save_parts(self_ptr self, const job_config& config, uint32_t b, uint32_t index,
                std::shared_ptr<checkpoint_writer> file, uint32_t first,
                std::function<void(caf::error)> done);

}  // namespace troupe::ps_plan
