// coordinator: the root of a job. It admits servers and workers (join), places the model's
// buckets on the servers, starts the workers, evaluates the model each time every live worker
// has finished an epoch (on a detached evaluator), and at the end gathers bucket statistics,
// writes the report, stops every node and quits: normally on success, with errc::job_failed
// when the job cannot go on (a lost server, no live worker left).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/evaluator.hpp"
#include "actors/heartbeat.hpp"
#include "actors/work_plan.hpp"
#include "messages/protocol.hpp"
#include "troupe/layout.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"
#include "troupe/task.hpp"

namespace troupe {

struct coordinator_config {
  launch_options opts;
  std::shared_ptr<const training_task> task;
  caf::actor_addr supervisor;
  logger log;
};

enum class job_phase { joining, placing, training, finishing };

struct member {
  std::string name;
  caf::actor_addr address;
  bool lost = false;
  bool done = false;
  endpoint data;         // a server's port for direct connections from workers
  uint64_t steps = 0;    // a worker's batches so far
  double compute_s = 0;  // a worker's time in gradient computation so far
  double wall_s = 0;     // a worker's time since it started training
};

struct coordinator_state {
  static inline const char* name = "troupe.coordinator";
  job_phase phase = job_phase::joining;
  std::vector<server_actor> servers;
  std::vector<member> server_members;
  std::vector<worker_actor> workers;
  std::vector<member> worker_members;
  std::optional<flat_layout> layout;
  placement plan;
  std::vector<bucket_actor> buckets;
  size_t placed = 0;
  std::optional<work_plan> work;   // which batches are handed out, done, or to be redone
  std::vector<double> epoch_loss;  // per epoch: summed batch losses reported so far
  std::vector<uint64_t> epoch_batches;
  std::vector<std::vector<uint64_t>> evaluation_rows;  // per table: rows evaluation reads
  heartbeat_monitor beats;                             // when each remote node was last heard from
  uint32_t evaluated = 0;                              // epochs evaluated so far
  bool evaluating = false;
  evaluator_actor evaluator;
  job_report report;
  std::chrono::steady_clock::time_point started;
};

coordinator_actor::behavior_type coordinator(
    coordinator_actor::stateful_pointer<coordinator_state> self, coordinator_config config);

}  // namespace troupe
