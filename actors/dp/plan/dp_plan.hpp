// The data-parallel plan (dp_state) of a job's coordinator (actors/coordinator), for --mode dp
// and hybrid; the shell beside it is actors/job. It admits --workers workers
// (join), forms their group (ranks, a generation, a token each) and serves the group's
// rendezvous store to members only, records each step the members report (losses, collective
// time and bytes, and compares their parameter checksums), evaluates member 0's parameters
// after each epoch on a detached evaluator, and at the end writes the report, stops every
// member and quits. Membership changes make a new generation: a member lost (its process
// went down, or its heartbeats stopped), a collective that failed with no loss to explain it,
// or a worker that joins a running job (up to --max-workers). The survivors then form the
// group again and go on from the most advanced member's state; a lost member that speaks up
// again is stopped with the reason (its process exits non-zero). Only when nobody is left
// does the job fail. With --checkpoint-dir, member 0 sends its state every
// --checkpoint-every steps (0: each epoch) and the coordinator writes it as a checkpoint in the
// parameter service's format (one bucket: the whole replica); --resume DIR starts member 0
// from the newest good one, and the others from member 0. When a standby takes over, the
// members rejoin it and form a new generation there (actors/dp/plan/dp_standing.cpp).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/dp/collective/generation_store.hpp"
#include "actors/job/coordinator_state.hpp"
#include "actors/records/checkpoint_file.hpp"
#include "actors/supervision/failure/heartbeat.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"
#include "troupe/task.hpp"

namespace troupe {

struct dp_member {
  std::string name;
  dp_worker_actor handle;
  uint64_t token = 0;
  std::string host;   // its host label
  uint32_t rank = 0;  // in the current generation
  bool lost = false;
  bool refused = false;  // lost, spoke again and was told to stop
  bool done = false;
  uint64_t steps = 0;                        // steps it took part in
  uint64_t last_step = 0;                    // the step of its newest report counted
  uint64_t examples = 0, step_examples = 0;  // it computed; of the steps it took part in
  uint32_t index = 0;                        // in join order (--worker-slowdown)
  double compute_s = 0;
  double wall_s = 0;
  uint64_t skipped_steps = 0;  // steps skipped for its own non-finite loss or gradient
  member_presence presence;    // joined, last heartbeat (the console, the stall watch)
};

// The data-parallel plan: its members, their generation and rendezvous store, the steps and
// the evaluations (the shell is the coordinator's, beside it).
struct dp_state final : job_plan {
  uint64_t generation = 0;
  std::vector<dp_member> members;
  generation_store store;                                      // this generation's rendezvous keys
  std::map<uint64_t, std::map<uint32_t, uint64_t>> checksums;  // step -> rank -> checksum
  std::vector<uint64_t>
      applied_examples;  // per epoch: examples of the steps applied (first report)
  std::optional<std::chrono::steady_clock::time_point> lost_at;  // a loss not yet re-formed
  std::vector<bool> snapshot_taken;  // per epoch: parameters queued for evaluation
  // Epochs whose parameters are arriving in parts (message_parts): each part once, from
  // whichever member sent it first.
  struct snapshot_parts {
    std::shared_ptr<eval_input> input;
    std::vector<bool> got;
    size_t missing = 0;
  };
  std::map<uint32_t, snapshot_parts> assembling;
  // The model's layout and the parts its parameters arrive in, made at the first part.
  std::optional<flat_layout> model;
  placement model_parts;
  std::optional<saved_checkpoint> resume_from;  // --resume: the checkpoint to start from
  // The checkpoint member 0 is sending its state for, written as the parts come.
  struct checkpoint_in_progress {
    std::shared_ptr<checkpoint_writer> file;
    uint64_t step = 0;
    uint32_t next = 0;  // the part expected next
    std::chrono::steady_clock::time_point began;
    // --mode hybrid: member 0's last part, answered once the tables' buckets are saved too
    // (they are once every member's report of the step is in), at the latest by the deadline.
    std::optional<caf::typed_response_promise<bool>> last_part;
    std::chrono::steady_clock::time_point deadline;
    bool saving_tables = false;
    // --zero-stage 1 and 2: the file's pieces (the bucket after member 0's parameters), every
    // member's own, written as they come once the parameters are in.
    uint32_t members = 0;  // the generation's members (0: member 0's state is all)
    bool parameters_done = false;
    std::vector<uint32_t> pieces_next;  // per rank: the index of its part expected next
    uint32_t pieces_left = 0;           // members whose last part is still to come
  };
  std::optional<checkpoint_in_progress> saving;
  // Member 0's first part of a checkpoint whose step some member has not reported yet.
  struct checkpoint_opening {
    uint64_t step = 0;
    wire part;
    caf::typed_response_promise<bool> answer;
  };
  std::optional<checkpoint_opening> opening;
  // Pieces that came before member 0's parameters were in, each answered once written.
  struct waiting_piece {
    uint32_t rank = 0;
    uint64_t step = 0;
    uint32_t index = 0, count = 0;
    wire part;
    caf::typed_response_promise<bool> answer;
  };
  std::vector<waiting_piece> pieces_waiting;
  uint64_t save_opened_step = 0;   // the step of the checkpoint member 0 began last
  std::vector<double> epoch_loss;  // per epoch
  std::vector<uint64_t> epoch_examples;
  // Steps some of whose members' reports are still to come: an epoch is evaluated (its
  // train loss taken) once none of its steps is open. A loss closes them all, and so does
  // the last member's done.
  struct open_step {
    uint32_t epoch = 0;
    uint64_t reported = 0;  // examples the reports so far computed
    uint64_t expected = 0;  // the step's examples over every member
  };
  std::map<uint64_t, open_step> open_steps;
  std::deque<std::pair<uint32_t, std::shared_ptr<eval_input>>> to_evaluate;
  bool evaluating = false;
  uint32_t evaluated = 0;
  uint64_t steps = 0;         // global steps applied
  uint32_t global_batch = 0;  // --batch x the members at the start, shared by the members
  uint64_t steps_per_epoch = 0;
  double exposed_s = 0;
  struct {
    metric_value* bytes = nullptr;
    histogram_value* seconds = nullptr;
    metric_value* generation = nullptr;
    metric_value* members = nullptr;
  } group_metrics;
  evaluator_actor evaluator;
  std::vector<std::string> generation_members;  // the live members of the last generation
  uint64_t skipped_in_a_row = 0;  // the group's skipped steps since its last applied one
  // Taking over: the rejoins' replies with each member's index, answered once the group forms;
  // --mode hybrid: it forms once the tables are served again (on_tables_ready).
  std::vector<std::pair<caf::typed_response_promise<wire>, uint32_t>> replies;
  bool form_when_tables_ready = false;

  void fill_report(coordinator_self self, const job_config& config) override;
  void stand(coordinator_self self, const job_config& config, coordinator_standing& x,
             std::vector<std::function<void()>>& held) override;
  void without_standby(coordinator_self self) override;
  void live_members(std::vector<caf::actor>& out) const override;
  void end(const caf::error&) override {}
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
};

}  // namespace troupe
