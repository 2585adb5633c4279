// The parameter service's plan (ps_state) of a job's coordinator (actors/coordinator), for
// --mode ps, an app's service on servers and --mode hybrid's tables; the shell beside it is
// actors/job. It admits servers and workers (join), places the model's buckets on the servers
// (with --replication R, a primary and a chain of R - 1 backups, each on its own server),
// starts the workers, evaluates the model each time every live worker has finished an epoch
// (on a detached evaluator), and at the end gathers bucket statistics for the report. The job
// fails when it cannot go on (a server lost without a backup, no live worker left). It is also
// the directory of bucket handles that workers ask when a bucket restarts or a backup takes
// over, takes checkpoints (--checkpoint-dir) and resumes from them (--resume), and injects
// faults. The work is split over ps_plan.cpp (start, progress, evaluation, wind-up),
// membership.cpp (joins, losses, heartbeats), placement.cpp (placement, replication,
// recovery, faults), checkpointing.cpp, inspection.cpp and diagnostics.cpp (the console's
// views), operations.cpp (the console's actions: checkpoint now, drain, log level), standing.cpp
// and takeover.cpp (its part of the standing and of a takeover). With --mode hybrid it holds
// only the tables, which the dp plan beside it uses (tables.cpp, actors/dp/plan/dp_tables.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/job/coordinator_state.hpp"
#include "actors/ps/work_plan.hpp"
#include "actors/records/checkpoint_file.hpp"
#include "actors/supervision/failure/heartbeat.hpp"
#include "messages/protocol.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"
#include "troupe/task.hpp"

namespace troupe {

struct member {
  std::string name;
  caf::actor_addr address;
  bool lost = false;
  bool done = false;
  endpoint data;                  // a server's port for direct connections from workers
  std::string host;               // a worker's host label (the cores it shares)
  uint64_t steps = 0;             // a worker's batches so far
  uint64_t clock = 0;             // a worker's logical clock (its pushes), from its last progress
  double compute_s = 0;           // a worker's time in gradient computation so far
  double wall_s = 0;              // a worker's time since it started training
  member_presence presence;       // joined, last heartbeat (the console, the stall watch)
  uint64_t skipped_steps = 0;     // a worker's non-finite chunks (nothing pushed)
  uint64_t skipped_in_a_row = 0;  // of those, since its last finite one
  double last_loss = 0;           // a worker's mean loss over its last chunk
  std::deque<double> recent_losses;  // a worker's last chunk losses (loss oscillation), bounded
  bool draining = false;             // the console is draining it
  bool drained = false;              // it left cleanly (lost is set too: it is gone)
};

// Chunk losses kept per worker for the loss-oscillation diagnostic.
constexpr size_t recent_loss_count = 32;

// The most chunks one claim is given, whatever the worker asks (work_plan::claim_lease gives
// fewer near the job's end).
constexpr uint32_t max_lease_chunks = 64;

// One backup of a bucket: its actor, its server, and how often that server's supervisor
// restarted it.
struct bucket_copy {
  bucket_actor handle;
  uint32_t server = 0;
  uint64_t restarts = 0;
};

// Where one bucket lives: its primary's server and its chain of backups (--replication R keeps
// R - 1, on R different servers): the primary forwards to backups[0], each backup to the next,
// and each acknowledges only once the next one has (replicas.cpp).
struct bucket_home {
  uint32_t primary_server = 0;
  std::vector<bucket_copy> backups;
  bool recovering = false;        // a backup is being promoted
  uint64_t promotion = 0;         // promotions begun: an answer to an older one is ignored
  uint64_t primary_restarts = 0;  // by the primary's server's supervisor
  bool adding = false;            // a backup is being added at the end of the chain
  std::vector<std::function<void()>> after_adding;  // additions waiting their turn
  // which() requests held until the bucket has a new handle, and the coordinator's own
  // requests to send again then.
  std::vector<caf::typed_response_promise<bucket_actor>> waiting;
  std::vector<std::function<void()>> when_served;

  // The backup on server s, if any.
  std::optional<size_t> backup_on(uint32_t s) const {
    for (size_t i = 0; i < backups.size(); ++i)
      if (backups[i].server == s) return i;
    return std::nullopt;
  }
  bool holds_copy_on(uint32_t s) const { return primary_server == s || backup_on(s); }
  // Servers where a copy left the chain while they lived (it may still run there).
  std::vector<uint32_t> left_on;
  bool left_on_server(uint32_t s) const {
    return std::find(left_on.begin(), left_on.end(), s) != left_on.end();
  }
  bool has_live_backup(const std::vector<member>& servers) const {
    for (const auto& c : backups)
      if (!servers[c.server].lost) return true;
    return false;
  }
};

// The job's members (membership.cpp): every server and worker that joined, by rank, with
// what the coordinator knows of each (the shell's monitor judges their heartbeats).
struct job_roster {
  std::vector<server_actor> servers;
  std::vector<member> server_members;  // parallel to servers
  std::vector<worker_actor> workers;
  std::vector<member> worker_members;  // parallel to workers
};

// Where the model lives (placement.cpp): the flat layout, the buckets cut from it, each
// bucket's primary and backups, and the recovery of buckets whose server was lost.
struct bucket_directory {
  std::optional<flat_layout> layout;
  placement plan;
  std::vector<bucket_actor> buckets;  // each bucket's primary
  std::vector<bucket_home> homes;     // parallel to buckets
  std::vector<wire> specs;            // each bucket's spec as placed (new backups start here)
  std::vector<float> initial;         // a new job's initial values, until every bucket is placed
  uint32_t next_to_place = 0;         // buckets are placed a few at a time, in order
  size_t placed = 0;
  size_t recovering = 0;                          // buckets with a backup being promoted
  std::chrono::steady_clock::time_point lost_at;  // when the last server was lost
};

// Checkpoints (checkpointing.cpp): the one resumed from and the one being taken (their
// schedule, the files written and the console's requests are the shell's).
struct checkpoint_progress {
  std::optional<saved_checkpoint> resume_from;  // --resume: the checkpoint to start from
  uint64_t chunks_done = 0;                     // chunks finished: pushes acked per bucket
  std::map<uint64_t, uint64_t> chunks_at_step;  // chunks_done when each checkpoint was taken
  bool taking = false;
  bool spoiled = false;  // a worker started while the others were paused
};

// Training (ps_plan.cpp): which batches are handed out and the losses reported.
struct training_progress {
  std::optional<work_plan> work;   // which batches are handed out, done, or to be redone
  std::vector<double> epoch_loss;  // per epoch: summed batch losses reported so far
  std::vector<uint64_t> epoch_batches;
};

// Evaluation (ps_plan.cpp): the detached evaluator and the epochs it has scored.
struct evaluation_progress {
  std::vector<std::vector<uint64_t>> rows;  // per table: rows evaluation reads
  uint32_t evaluated = 0;                   // epochs evaluated so far
  bool running = false;
  uint64_t round = 0;  // a server loss starts a new one: older replies are dropped
  evaluator_actor actor;
};

// The parameter service's plan: its members, its buckets, its checkpoints, its batches and
// its evaluations (the shell is the coordinator's, beside it).
struct ps_state final : job_plan {
  job_roster roster;
  bucket_directory directory;
  checkpoint_progress checkpoints;
  training_progress training;
  evaluation_progress evaluation;
  // `tables` requests held until the buckets are ready (the group's one; an app service's
  // owner and the nodes that connect to it).
  std::vector<caf::typed_response_promise<std::vector<bucket_actor>, std::string>> tables_wanted;
  // Taking over: the rejoined workers' accounts (reconciled at the end), and the rejoins'
  // replies with each member's rank, answered once every member is back or at the deadline.
  std::vector<rejoin_request> accounts;
  std::vector<std::pair<caf::typed_response_promise<wire>, uint32_t>> replies;

  void fill_report(coordinator_self self, const job_config& config) override;
  void stand(coordinator_self self, const job_config& config, coordinator_standing& x,
             std::vector<std::function<void()>>& held) override;
  void live_members(std::vector<caf::actor>& out) const override;
  void end(const caf::error& ended) override;
  void wind_up(coordinator_self self, const job_config& config,
               std::function<void()> then) override;
  std::string summary(const job_report& r) const override;
  size_t missing() const override;
  size_t rejoined() const override;
  void taken_over(coordinator_self self, const job_config& config) override;
  bool heard(coordinator_self self, const job_config& config, const heartbeat& beat) override;
  void silent(coordinator_self self, const job_config& config, const std::string& name,
              const std::string& why) override;
  bool busy() const override;
  void activity(std::vector<heard_activity>& out) const override;
  void cards(std::vector<member_card>& out) const override;
  void tree_rows(const actor_values& mailboxes, table_view& t) const override;
  std::vector<std::string> views() const override;
  caf::result<wire> view(coordinator_self self, const job_config& config,
                         const std::string& name) override;
  caf::result<std::string> checkpoint_now(coordinator_self self, const job_config& config) override;
  std::vector<std::string> actions() const override;
  caf::result<std::string> operate(coordinator_self self, const job_config& config,
                                   const std::vector<std::string>& action) override;
};

}  // namespace troupe
