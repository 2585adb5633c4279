// coordinator_state: a job's coordinator is one actor (actors/coordinator), the job shell with
// the plans of its mode: the parameter service's (ps_state, actors/ps: placement, batches,
// replicas, evaluation) for --mode ps, the data-parallel group's (dp_state, actors/dp/plan:
// generations, steps, the rendezvous store) for --mode dp, and both for --mode hybrid, where
// the ps plan holds only the embedding tables. This header gives the plans and the shell their
// common types: the configuration, the state, the actor pointer, and job_plan, what the shell
// asks of every plan (the report, the standing, the members, the end). Called by the plans,
// the shell's functions and the coordinator actor.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/job/job_shell.hpp"
#include "actors/supervision/failure/activity_board.hpp"
#include "messages/protocol.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"
#include "troupe/log.hpp"
#include "troupe/metrics.hpp"
#include "troupe/options.hpp"
#include "troupe/task.hpp"

namespace troupe {

// An app's parameter service placed on servers (parameter_service::start with servers): its
// buckets, made ready by the service. Such a coordinator admits servers only, places the
// buckets with opts.replication copies, hands them to whoever asks for the tables once placed,
// serves which/moved and recovers lost servers until a stop from its own process.
struct service_buckets {
  std::vector<tensor_spec> tensors;
  placement plan;           // each bucket's slices (and server: b % opts.servers)
  std::vector<wire> specs;  // each bucket's spec, by bucket id
};

struct job_config {
  launch_options opts;
  std::shared_ptr<const training_task> task;  // none for an app's service
  caf::actor_addr supervisor;
  logger log;
  std::shared_ptr<metrics_registry> metrics;  // the node's; none: no metrics
  // A standby taking over: the old primary's last standing, when it arrived, and why the old
  // primary was judged lost.
  std::optional<coordinator_standing> takeover;
  std::chrono::steady_clock::time_point takeover_heard;
  std::string takeover_why;
  std::optional<service_buckets> service;  // an app's service; none: a job's (task, flags)
  // What the members in this coordinator's own process are doing (the stall report); none
  // when it has none.
  std::shared_ptr<activity_board> activity;
  // Told the parameters after each epoch, before they are evaluated: member 0's (--mode dp and
  // hybrid), or the buckets' snapshot (ps, diloco); none: nobody.
  std::function<void(uint32_t epoch, std::span<const float> params)> on_parameters;

  // The ps plan's buckets go to others (a hybrid group's members, an app service's clients)
  // instead of workers of its own.
  bool hands_out_buckets() const { return opts.hybrid() || service.has_value(); }
};

// One member of a plan as the shell shows and reaches it, whatever its plan: a row of the
// console's `nodes`, a node whose metrics the console's `metrics` reads, a node told a new log
// level.
struct member_card {
  std::string role;  // server, worker
  std::string name;
  std::string address;  // where its data is reached, "-" when nowhere
  std::string state;    // live, lost, done, drained
  double uptime_s = 0;
  std::optional<heartbeat_monitor::clock::time_point> heard;  // none: it sends no heartbeats
  double cpu_s = 0;                                           // its process's, from a heartbeat
  uint64_t rss = 0;
  caf::actor handle;         // a live member's: it takes log levels; none once lost
  bool has_metrics = false;  // it answers metrics (its node's)
};

// What a plan keeps of each member's presence for the shell: when it joined, and its last
// heartbeat (when, its process's CPU time and memory, what its actors were doing).
struct member_presence {
  heartbeat_monitor::clock::time_point joined = heartbeat_monitor::clock::now();
  heartbeat_monitor::clock::time_point heard = joined;
  bool beating = false;  // it has sent a heartbeat
  double cpu_s = 0;
  uint64_t rss = 0;
  std::vector<member_activity> activity;

  void take(const heartbeat& beat) {
    heard = heartbeat_monitor::clock::now();
    beating = true;
    cpu_s = beat.cpu_seconds;
    rss = beat.rss_bytes;
    activity = beat.activity;
  }
  heard_activity last() const { return heard_activity{activity, heard}; }
  // Its card: `handle` is left out when it is lost.
  member_card card(std::string role, std::string name, std::string address, bool lost,
                   std::string state, caf::actor handle, bool has_metrics) const {
    member_card c{std::move(role),
                  std::move(name),
                  std::move(address),
                  std::move(state),
                  seconds_since(joined),
                  std::nullopt,
                  cpu_s,
                  rss,
                  {},
                  has_metrics};
    if (beating) c.heard = heard;
    if (!lost) c.handle = std::move(handle);
    return c;
  }
};

// (node, actor) -> one per-actor metric's value, e.g. mailbox sizes, read from the nodes'
// metrics texts.
using actor_values = std::map<std::pair<std::string, std::string>, std::string>;

struct coordinator_state;
using coordinator_self = job_actor::stateful_pointer<coordinator_state>;

// What the shell asks of each plan of the job (ps_state, dp_state).
class job_plan {
 public:
  virtual ~job_plan() = default;
  // Its figures in the report (steps, workers, bytes, ...), before the report is written.
  virtual void fill_report(coordinator_self self, const job_config& config) = 0;
  // Its part of the standing the standby follows; `held` gets what to tell its members once
  // the standby has taken it (what they may stop holding for a takeover).
  virtual void stand(coordinator_self self, const job_config& config, coordinator_standing& x,
                     std::vector<std::function<void()>>& held) = 0;
  // No standby follows: what `stand` would tell its members once held is told now.
  virtual void without_standby(coordinator_self) {}
  // Its live members, to be told to stop at the job's end.
  virtual void live_members(std::vector<caf::actor>& out) const = 0;
  // The job ends: requests it holds are answered with `ended` (a held promise answers nothing).
  virtual void end(const caf::error& ended) = 0;
  // The job's work is done: what the plan gathers for the report first (the buckets'
  // statistics), then `then()`.
  virtual void wind_up(coordinator_self self, const job_config& config,
                       std::function<void()> then) = 0;
  // Its figures in the log's last line ("updates applied ...", "allreduce ...").
  virtual std::string summary(const job_report& r) const = 0;
  // Taking over: its members the standing names as live that have not rejoined yet, and those
  // back; once none is missing, or at the deadline, it goes on with those back.
  virtual size_t missing() const = 0;
  virtual size_t rejoined() const = 0;
  virtual void taken_over(coordinator_self self, const job_config& config) = 0;

  // -- membership: the shell's one heartbeat monitor judges, each plan keeps its members
  // A heartbeat: whether it is from a live member of this plan (whose figures it takes).
  virtual bool heard(coordinator_self self, const job_config& config, const heartbeat& beat) = 0;
  // Its member `name` sent no heartbeat in time: lost `why` (a name not its own: nothing).
  virtual void silent(coordinator_self self, const job_config& config, const std::string& name,
                      const std::string& why) = 0;
  // The stall watch: whether it waits on purpose now (an evaluation, a checkpoint being taken),
  // and what its live members last did.
  virtual bool busy() const = 0;
  virtual void activity(std::vector<heard_activity>& out) const = 0;

  // -- the console
  // Its members, lost ones included, in its order.
  virtual void cards(std::vector<member_card>& out) const = 0;
  // Its rows of the supervision tree (below the coordinator's), with the mailbox sizes read
  // from the nodes' metrics.
  virtual void tree_rows(const actor_values& mailboxes, table_view& t) const = 0;
  // Its own views beside the shell's (nodes, tree, metrics, timeline, curve).
  virtual std::vector<std::string> views() const = 0;
  virtual caf::result<wire> view(coordinator_self self, const job_config& config,
                                 const std::string& name) = 0;
  // The console's `checkpoint` while the job trains with --checkpoint-dir, asked of the plan
  // that trains: the promise waits in shell.checkpoints.waiters for the next file.
  virtual caf::result<std::string> checkpoint_now(coordinator_self self,
                                                  const job_config& config) = 0;
  // Its own operator actions (their first words), and one of them let through the gate.
  virtual std::vector<std::string> actions() const { return {}; }
  virtual caf::result<std::string> operate(coordinator_self, const job_config&,
                                           const std::vector<std::string>& action) {
    return make_error(errc::bad_configuration, "no operator action '" + action.front() + "'");
  }
};

struct ps_state;  // actors/ps/ps_plan.hpp
struct dp_state;  // actors/dp/plan/dp_plan.hpp

struct coordinator_state {
  static inline const char* name = "troupe.coordinator";
  job_shell shell;
  std::unique_ptr<ps_state> ps;  // --mode ps and hybrid (the tables), an app's service
  std::unique_ptr<dp_state> dp;  // --mode dp and hybrid
  // --mode hybrid: the ps plan's tables are ready (placed, or served again after a takeover);
  // the coordinator tells the dp plan.
  std::function<void()> on_tables_ready;
  coordinator_state();
  ~coordinator_state();
  // The plans this job has, ps first.
  std::vector<job_plan*> plans() const;
  // The plan whose work is the job's training: the group's when it has one (--mode hybrid's
  // parameter service holds only tables), the parameter service's otherwise.
  job_plan* trainer() const;
};

// -- the shell's functions over every plan (actors/job/shell_end.cpp) ------------------------

// Asks every live member of every plan to stop, then quits with `reason` (none: the job is
// done). The standby following it stops too; requests the plans hold are answered.
void end_job(coordinator_self self, const job_config& config, caf::error reason);

// The job failed `why`: the report says so (written before anything is stopped), then
// end_job. Waits while the standing is overdue (the standby may have taken over).
void fail_job(coordinator_self self, const job_config& config, std::string why);

// The job's work is done: the standby is let go, the plans wind up, the report is written and
// the members are stopped.
void finish_job(coordinator_self self, const job_config& config);

// The standing, from the shell and every plan, to the standby (if one follows).
void send_standing(coordinator_self self, const job_config& config);

// A standby takes over from config.takeover: the term after the old primary's, the members'
// deadline to rejoin, the training clock and the report's history go on from the standing, and
// the old primary is a loss. Then each plan takes its part (actors/coordinator).
void begin_takeover(coordinator_self self, const job_config& config);

// Ends the takeover once no member of any plan is missing, or at its deadline: the takeover is
// in the report, and each plan goes on (ps first: --mode hybrid's group needs its tables).
void end_takeover_when_back(coordinator_self self, const job_config& config);

// follow: `standby` follows this coordinator from now on; returns the term.
uint64_t follow_job(coordinator_self self, const job_config& config, standby_actor standby);

// -- membership (actors/job/shell_members.cpp) --------------------------------------------------

// A member in another process is heard from: from now on, silence longer than
// --heartbeat-timeout-ms loses it. `forget_member` when it is lost or leaves.
void expect_heartbeats(coordinator_self self, const std::string& name, const caf::node_id& node);
void forget_member(coordinator_self self, const std::string& name);
// A heartbeat, for whichever plan the member is in; returns this coordinator's term.
uint64_t on_heartbeat(coordinator_self self, const job_config& config, const wire& w);
// The most resident memory member `name`'s process held, in MiB: from its heartbeats and the
// job's end (gather_peaks); a member in the coordinator's process (`here`) shares its figure.
double peak_rss_mb(const job_shell& shell, const std::string& name, bool here);
// Before the report of a finished job: asks every live member in another process for its
// process's peak memory (each within the console's wait), then `then()`.
void gather_peaks(coordinator_self self, const job_config& config, std::function<void()> then);
// Every tick: members silent for longer than the timeout are lost (a pause of this process
// judges nobody), and the stall watch judges the job's progress.
void check_members(coordinator_self self, const job_config& config);

// -- the console (actors/job/shell_console.cpp) -------------------------------------------------

// Every plan's members, ps first.
std::vector<member_card> member_cards(const coordinator_state& st);
using node_texts = std::vector<std::pair<std::string, std::string>>;  // node name, metrics text
// How long the console waits for one node's or bucket's figures: one about to be declared lost
// should not hold every other's back for the full request timeout.
std::chrono::seconds console_wait(const job_config& config);
// Asks every live member in another process that has metrics for them; `done` gets them, the
// coordinator's own process first. Nodes that do not answer within a few seconds are left out.
void gather_metrics(coordinator_self self, const job_config& config,
                    std::function<void(node_texts)> done);
// One per-actor metric (e.g. troupe_actor_mailbox_size) of every node.
actor_values per_actor(const node_texts& texts, const std::string& metric);
// `actor`'s value on node `node` (or in the coordinator's process, whose nodes share its
// metrics); "-" when it has none.
std::string value_of(const actor_values& values, const std::string& node, const std::string& actor);
// A view for the console: the shell's (nodes, tree, metrics, timeline, curve) or a plan's.
caf::result<wire> inspect_job(coordinator_self self, const job_config& config,
                              const std::string& view);
// An action the operator gate let through: `log LEVEL [NODE]` (the shell's), `checkpoint`
// (the plan that trains), or a plan's own.
caf::result<std::string> operate_job(coordinator_self self, const job_config& config,
                                     const std::vector<std::string>& action);
// The console's `checkpoint`: answered with the next checkpoint's path, or why none was
// written (a skip, the job's end).
caf::result<std::string> next_checkpoint(coordinator_self self);
std::string fixed(double x, int digits = 2);

}  // namespace troupe
