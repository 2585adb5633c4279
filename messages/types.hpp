// The in-memory form of every message in troupe.capnp that apps do not see: plain value types
// that actors use (what apps see, the tensors, pulls, pushes and configurations, is in
// troupe/values.hpp). Tensor values are always fp32 here; the storage dtype is chosen when
// encoding. Decoding (codec.hpp) is the only way to build these from bytes, and it validates them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "troupe/values.hpp"
#include "troupe/vector_clock.hpp"

namespace troupe {

struct bucket_spec {
  uint32_t bucket = 0;
  uint32_t workers = 0;
  optimizer_config optimizer;
  std::vector<dense_tensor> tensors;  // the slices this bucket owns, with initial values
  consistency_config consistency;
  compensation_config compensation;
  std::vector<table_config> tables;  // this bucket holds the rows hashed to it
  uint32_t bucket_count = 1;         // buckets sharing the tables' rows
  uint64_t seed = 0;                 // rows are initialised from (seed, table, id)
  float clip = 0.0f;                 // clip each row's gradient to this L2 norm (0: off)
  float sync_threshold = 0.0f;       // a pull sends only rows that moved more than this (0: off)
  // The tensors carry shapes only: their values come after, in `values` parts of a saved
  // bucket (bucket_store::save), so that no message holds a whole slice.
  bool values_follow = false;
  // --export-dir: where a primary writes its tables' changed rows every export_every_s
  // seconds, a snapshot every export_snapshot_every files (troupe/table_deltas.hpp); empty: no.
  std::string export_dir;
  uint32_t export_every_s = 10;
  uint32_t export_snapshot_every = 10;
};

// One embedding table's share in a bucket: rows held, and what eviction and admission did.
struct table_counters {
  std::string table;
  uint64_t rows = 0;
  uint64_t rows_evicted = 0;
  uint64_t ids_not_admitted = 0;  // reads of ids not admitted yet
  uint64_t grads_dropped = 0;     // row gradients for ids without a row
};

struct bucket_stats {
  uint32_t bucket = 0;
  uint64_t version = 0;
  uint64_t updates_applied = 0;
  uint64_t updates_rejected = 0;
  uint64_t max_staleness = 0;
  uint64_t staleness_sum = 0;
  vector_clock clock;
  std::vector<uint64_t> staleness_histogram;  // entry t: pushes applied with staleness t
  uint64_t max_clock_gap = 0;
  uint64_t updates_skipped = 0;   // pushes with nothing to apply (non-finite at the worker)
  double update_variance = 0;     // variance / mean^2 of the recent applied gradients' norms
  uint64_t duplicate_pushes = 0;  // pushes of batches already counted here (acknowledged only)
  std::vector<table_counters> tables;
};

// -- saved bucket state (checkpoints, new backups) ---------------------------------------------

struct bucket_counters {
  vector_clock clock;
  std::vector<bool> retired;
  std::vector<uint64_t> start;    // per worker: starting clock plus skipped steps
  std::vector<uint8_t> in_round;  // bsp: per worker 0 none, 1 pushed, 2 skipped
  uint64_t version = 0;
  uint64_t applied = 0;
  uint64_t rejected = 0;
  uint64_t max_staleness = 0;
  uint64_t staleness_sum = 0;
  uint64_t max_clock_gap = 0;
  std::vector<uint64_t> histogram;
  std::vector<uint64_t> next_push;  // per worker: the push clock expected next
  uint64_t skipped = 0;
  uint64_t duplicates = 0;
  std::vector<batch_range> counted_batches;  // the batches counted here (batch_record's ranges)
};

// Saved rows of one embedding table (or, for round_rows, one bsp round's summed gradients).
struct table_rows {
  std::string table;
  uint32_t row_dim = 1;
  std::vector<uint64_t> ids;
  std::vector<float> values;  // ids.size() * row_dim
  std::vector<float> m;       // empty when the optimizer keeps no first moment
  std::vector<float> v;       // empty when the optimizer keeps no second moment
  std::vector<uint64_t> steps;
  std::vector<uint32_t> marks;  // per row: its eviction mark (empty: a table without eviction)
};

// The admission and eviction state of one table's share besides its rows (sparse_table).
struct table_state {
  std::string table;
  std::vector<uint8_t> sightings;  // the admission sketch's counters (empty: admit_after 1)
  uint64_t since_halving = 0;      // sightings since the sketch's counters were halved
  uint32_t tick = 0;               // lru: reads so far
  uint64_t reads_since_aging = 0;  // lfu: row reads since the marks were halved
  uint32_t last_sweep = 0;         // ttl: when rows were last expired (seconds)
  uint64_t rows_evicted = 0;
  uint64_t ids_not_admitted = 0;
  uint64_t grads_dropped = 0;
};

// One part of a bucket's saved state; see bucket_store::save().
struct bucket_state_part {
  enum class kind : uint8_t {
    counters = 0,
    first_moment = 1,
    second_moment = 2,
    mean_square = 3,
    round_sum = 4,
    read = 5,
    rows = 6,
    round_rows = 7,
    dash = 8,    // one slice's DASH statistics or roots (worker: the slice), see bucket_store
    values = 9,  // the slices' values (after a spec whose values follow)
    table_state = 10,  // one table's admission and eviction state (state)
  };
  uint32_t bucket = 0;
  kind type = kind::counters;
  uint32_t worker = 0;                // read: whose copy
  std::vector<dense_tensor> tensors;  // values, moments and read copies: one per slice, or
                                      // ranges (below)
  bucket_counters counters;
  table_rows rows;
  // The tensors are ranges of slices: each named by its slice's index, its row_offset the
  // first value of the range within the slice, its shape {count}.
  bool ranged = false;
  table_state state;  // table_state parts only
};

// The version of troupe.capnp's meaning that nodes speak. A gatekeeper refuses a node of
// another version (naming both) before anything else crosses. 2: DASH's choices and the
// collective travel as Cap'n Proto enums; app update rules (optimizer kind app). 5: a push
// names its batches, and a bucket's saved state the batches it counted. 6: a node hands out
// the loop groups it serves (coordinator_actor's group), and a service's directory its data
// lane. 7: the tables' server list that hybrid members get names each server's data lane
// (to_server_list). 8: a service's directory names the server nodes that hold its buckets.
// 9: heartbeats carry the members' activity; progress and step reports say who skipped.
// 10: DiLoCo: a start's local rounds, the outer optimizers (nesterov, delayed-nesterov) and
// int8 storage of tensor values. 11: tables' eviction and admission (their spec, saved state
// and counters; a mirrored pull's evictions).
constexpr uint32_t wire_schema_version = 11;

struct hello {
  role sender = role::worker;
  std::string name;
  std::vector<uint8_t> node_nonce;
  uint32_t schema_version = wire_schema_version;
};

struct challenge {
  uint64_t session = 0;
  std::vector<uint8_t> gatekeeper_nonce;
  std::vector<uint8_t> gatekeeper_proof;
  uint32_t schema_version = wire_schema_version;  // the gatekeeper's; the node checks it too
};

struct proof {
  uint64_t session = 0;
  std::vector<uint8_t> node_proof;
};

// A console action that changes the job (inject-fault, drain, checkpoint, log) with its proof
// over tls::action_text(nonce, action): a signature by an operator certificate's key under
// --tls-dir, an HMAC under the operator secret otherwise
// (actors/supervision/admission/operator_gate.hpp).
struct operator_action {
  std::string nonce;                // the coordinator's (hex), used once
  std::vector<std::string> action;  // the command, then its arguments
  std::string certificate;          // PEM of the operator's certificate; empty without TLS
  std::vector<uint8_t> proof;
};

// A host and port; port 0 means none (in-process actors need no connection).
struct endpoint {
  std::string host;
  uint16_t port = 0;
  uint16_t lane = 0;  // a server's data lane port on the same host (actors/lane); 0: none
};

// Servers' data endpoints as text, "HOST:PORT[/LANE],...", where a message carries them as a
// string (the tables' servers that a hybrid group's members connect to). Parsing refuses a
// malformed entry (errc::malformed_message); an entry without "/LANE" has no lane.
std::string to_server_list(const std::vector<endpoint>& servers);
caf::expected<std::vector<endpoint>> parse_server_list(const std::string& text);

struct join_request {
  role sender = role::worker;
  std::string name;
  uint32_t pid = 0;
  endpoint data;  // a server's own port, where workers connect to reach its buckets directly
  std::string host_label;  // the host a worker counts as (--host-label, or its host name)
};

struct join_reply {
  uint32_t rank = 0;
  uint32_t world_workers = 0;
  uint32_t world_servers = 0;
  uint64_t term = 0;  // the coordinator's term: 0 for the first, +1 at each takeover
};

// What one member is doing and what it waits on, and for how long (activity_board.hpp): sent
// with its process's heartbeats, and the stall watchdog's report.
struct member_activity {
  std::string member;
  std::string doing;       // e.g. "step 31"
  std::string waiting_on;  // e.g. "user code: gradient", "collective", "pull"
  double since_s = 0;      // seconds since it began
};

struct heartbeat {
  std::string name;
  uint64_t sequence = 0;
  uint64_t sent_unix_ms = 0;
  double cpu_seconds = 0;                 // the node's process: CPU time so far
  uint64_t rss_bytes = 0;                 // and resident memory
  std::vector<member_activity> activity;  // its members' (at most max_activity_records)
  uint64_t peak_rss_bytes = 0;            // the most resident memory its process has held
};
inline constexpr size_t max_activity_records = 64;

// A view of the running job for the console: named columns, rows of text cells.
struct table_view {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // each as many cells as columns
};

struct slice {
  std::string tensor;
  uint32_t row_offset = 0;
  std::vector<uint32_t> shape;
};

struct bucket_placement {
  uint32_t bucket = 0;
  uint32_t server = 0;
  std::vector<slice> slices;
};

struct placement {
  uint64_t version = 0;
  std::vector<bucket_placement> buckets;
};

// --mode diloco: what a worker's rounds need (actors/worker/local_rounds.hpp). A round is one
// claimed chunk of batches, each a local step of `inner`; the worker then pushes its
// pseudo-gradient (start values - its own), fragment by fragment.
struct local_rounds {
  optimizer_config inner;                 // stepped on the worker; its state stays there
  uint32_t fragments = 1;                 // groups of buckets synced at staggered steps
  comm_dtype storage = comm_dtype::fp32;  // how pseudo-gradients travel (int8: error feedback)
  double slowdown = 1;                    // --worker-slowdown: this worker's factor per batch
};

struct start_job {
  uint32_t worker = 0;
  uint32_t workers = 0;
  uint32_t epochs = 0;
  uint32_t batch = 0;
  uint64_t seed = 0;
  placement layout;
  std::vector<endpoint> servers;  // data endpoint of each server, by server rank
  uint32_t accumulate = 1;        // batches whose gradients are averaged into one push
  bool prefetch = false;          // pull the next values while the current batch computes
  uint32_t delay_ms = 0;          // extra milliseconds per batch (straggler experiments)
  bool compress_signs = false;    // push 1-bit signs with error feedback instead of fp32
  uint64_t clock = 0;             // starting clock: a late joiner starts at the slowest's
  uint32_t workers_on_host = 0;   // the job's workers on this worker's host (0: unknown)
  bool pulls_held = false;        // buckets may hold a pull until the others catch up (ssp, bsp)
  std::optional<local_rounds> rounds;  // --mode diloco; none: a push per chunk of gradients
};

// Batches first .. first + count - 1 of one epoch; count 0 means no work is left.
using work_chunk = batch_range;

// What one claim hands a worker: chunks to do in this order; none means no work is left.
struct work_lease {
  std::vector<work_chunk> chunks;
};

// A worker finished `chunk`.
struct progress {
  uint32_t worker = 0;
  work_chunk chunk;
  double loss_sum = 0;        // sum of the chunk's batch losses
  double compute_s = 0;       // seconds the worker spent computing gradients so far
  double wall_s = 0;          // seconds since the worker started training
  double staleness = 0;       // mean staleness the buckets reported for the chunk's pushes
  uint64_t clock = 0;         // the worker's logical clock after this chunk's push
  bool skipped = false;       // its loss or gradient was not finite: nothing was pushed
  uint64_t pushed_bytes = 0;  // --mode diloco: the bytes of the round's pseudo-gradient
  // --mode diloco: the local steps of the round (0-based) whose loss or gradient was not
  // finite, skipped; `skipped` when that is all of them.
  std::vector<uint32_t> skipped_local;
};

// One worker's reports on the chunks it finished since its last batch, oldest first.
struct progress_batch {
  std::vector<progress> reports;
};

struct epoch_entry {
  uint32_t epoch = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  double train_loss = 0;
  double wall_s = 0;
  uint64_t examples = 0;  // --mode dp: examples the steps of the epoch were computed from
};

struct worker_entry {
  std::string name;
  uint64_t steps = 0;
  double utilization = 0;      // compute time / wall time
  double batch_share = 0;      // --mode dp: its share of the examples of the steps it took part in
  uint64_t skipped_steps = 0;  // steps skipped for its non-finite loss or gradient
  double peak_rss_mb = 0;      // its process's most resident memory (MiB), at its last heartbeat
};

// A server of the job (--mode ps, hybrid's tables): its process's most resident memory.
struct server_entry {
  std::string name;
  double peak_rss_mb = 0;
};

// A member the job lost: which, when (seconds since training began) and why.
struct loss_event {
  std::string name;
  role kind = role::worker;
  double at_s = 0;
  uint64_t at_unix_ms = 0;  // the same moment by the wall clock
  std::string reason;
};

// A standby coordinator took over the job: when the primary was lost (seconds since training
// began), how long until every member had rejoined, and the new term.
struct takeover_event {
  double at_s = 0;
  double took_s = 0;
  uint64_t term = 0;
};

struct job_report {
  double test_accuracy = 0;
  uint64_t steps = 0;
  double wall_s = 0;
  uint64_t updates_applied = 0;
  uint64_t updates_rejected = 0;
  uint64_t updates_skipped = 0;   // pushes with nothing to apply (their steps still count)
  uint64_t duplicate_pushes = 0;  // pushes of batches a bucket had counted: acknowledged only
  uint64_t max_staleness = 0;
  double mean_staleness = 0;
  uint64_t restarts = 0;
  std::vector<std::string> workers_lost;
  std::vector<std::string> drained;  // nodes the console drained (they left cleanly)
  std::vector<epoch_entry> epochs;
  std::vector<table_counters> tables;  // per embedding table, summed over its buckets
  double staleness_p50 = 0;
  double staleness_p99 = 0;
  uint64_t max_clock_gap = 0;
  std::vector<worker_entry> workers;
  std::vector<server_entry> servers;
  double coordinator_peak_rss_mb = 0;  // the coordinator's process (and its embedded members)
  std::vector<std::pair<std::string, double>> figures;  // the task's own (e.g. test_auc)
  // Fault tolerance (JSON only):
  std::string failure;  // why the job failed; empty when it finished
  // The stall watchdog ended the job (status "stalled"): each member's last activity.
  bool stalled = false;
  std::vector<member_activity> stall;
  uint64_t escalations = 0;
  std::vector<loss_event> losses;  // members lost, with when and why
  uint64_t updates_lost = 0;       // acknowledged updates lost with a server (0 with replicas)
  double recovery_s = 0;           // longest time from a server's loss to its buckets served
  uint64_t resumed_from_step = 0;  // the checkpoint's step when the job was resumed
  uint64_t checkpoints = 0;        // checkpoints written
  std::vector<takeover_event> takeovers;  // by standby coordinators
  std::string mode = "ps";                // ps | dp | hybrid | diloco
  // --mode diloco (JSON only): pseudo-gradients pushed (each a worker's round), and their bytes
  // as they travel (--comm-dtype).
  uint64_t rounds = 0;
  uint64_t pseudo_gradient_bytes = 0;
  // --mode dp (JSON only; modes "ps" and "diloco" leave these 0):
  uint32_t zero_stage = 0;                  // --zero-stage
  uint64_t allreduce_bytes = 0;             // sent by all members
  uint64_t allreduce_bytes_inter_host = 0;  // of those, between hosts
  double allreduce_s = 0;                   // summed over members
  double overlap = 0;                       // 1 - exposed allreduce time / allreduce_s
  uint64_t generations = 0;                 // group generations formed
  double reform_s = 0;                      // longest time from a loss to the next step
  uint64_t skipped_steps = 0;  // steps skipped (non-finite; dp: by every member; ps: a worker's)
  uint64_t checksum_mismatches = 0;
  // By stage of 1-bit / 0/1 Adam: warmup (full precision; every step of other optimizers)
  // and compressed.
  uint64_t allreduce_bytes_warmup = 0, allreduce_bytes_compressed = 0;
  uint64_t steps_warmup = 0, steps_compressed = 0;
  // The effective value of every flag (flag_settings), added when the report is written; not
  // on the wire.
  std::vector<std::pair<std::string, std::string>> settings;
};

// The job's part of a checkpoint (see actors/checkpoint.hpp).
struct job_checkpoint {
  uint64_t step = 0;  // batches finished by all workers when it was taken
  uint32_t epochs = 0;
  uint64_t batches_per_epoch = 0;
  uint32_t chunk = 1;
  uint32_t buckets = 0;
  uint64_t model_values = 0;
  uint32_t next_epoch = 0;
  uint64_t next_batch = 0;
  std::vector<work_chunk> pending;  // handed out or returned, not finished: to be done again
  std::vector<uint64_t> finished;   // per epoch: batches finished
  std::vector<double> epoch_loss;
  std::vector<uint64_t> epoch_batches;
  uint32_t evaluated = 0;
  std::vector<epoch_entry> history;
  double wall_s = 0;
  // --mode dp: the --zero-stage it was saved under. With 1 or 2 the model's state is two
  // buckets: member 0's parameters, then every member's pieces (piece records).
  uint32_t zero_stage = 0;
};

// -- an app's parameter service -------------------------------------------------------------------

struct named_shape {
  std::string name;
  std::vector<uint32_t> shape;
};

// A parameter service as an app_node serves it to remote actors (parameter_service::connect):
// its tensors in order, its bucket plan, its client count and the timeout of each request.
struct service_directory {
  std::vector<named_shape> tensors;
  placement plan;
  uint32_t clients = 0;
  uint64_t timeout_ms = 0;
  std::vector<table_config> tables;  // embedding tables, their rows hashed over the buckets
  uint16_t lane = 0;                 // the serving node's data lane port (0: none)
  // The server nodes that hold its buckets (to_server_list; empty: the serving node does). Then
  // the handle beside the directory is the coordinator that finds a bucket again, not a
  // supervisor.
  std::string servers;
};

// -- data-parallel groups (--mode dp) ---------------------------------------------------------

// The coordinator forms a group generation: member `rank` of `size` trains with these
// settings. `token` proves a member's store requests (only members learn each other's
// collective addresses).
// How a data-parallel group compresses its allreduces (resolved by the coordinator: every
// step count here is a step number of the job, none left to defaults).
struct dp_compression {
  comm_dtype dtype = comm_dtype::fp32;
  std::vector<std::string> skip;  // tensors kept at fp32
  compressed_adam adam = compressed_adam::none;
  uint64_t freeze_step = 0;          // onebit / zero_one: full-precision steps before compressing
  uint64_t var_freeze_step = 0;      // zero_one: the last step that may refresh the variance
  uint32_t var_update_scaler = 16;   // zero_one: refreshes at one interval before it doubles
  uint64_t local_step_scaler = 1;    // zero_one: steps before the local interval doubles
  uint32_t local_step_clipper = 16;  // zero_one: the most steps between synchronisations
};

struct group_start {
  uint32_t rank = 0;
  uint32_t size = 0;
  uint64_t generation = 0;
  uint64_t token = 0;
  uint32_t epochs = 0;
  uint32_t global_batch = 0;  // examples per optimizer step, shared out among the members
  uint64_t seed = 0;
  optimizer_config optimizer;
  uint64_t bucket_bytes = 0;  // gradient bucket cap
  bool overlap = true;        // reduce buckets while backward runs
  uint32_t checksum_every = 0;
  collective_kind collective = collective_kind::gloo;  // the backend between members
  uint64_t timeout_ms = 0;                             // the bound of every collective
  uint64_t checkpoint_every = 0;   // steps between member 0's saves for checkpoints (0: none)
  uint64_t group_key = 0;          // the generation's, the same for every member (actors backend)
  std::vector<std::string> hosts;  // each rank's host label
  bool two_level = false;          // reduce inside each host, then each local rank across hosts
  dp_compression compression;
  uint32_t accumulate = 1;  // micro-batches each member averages before one allreduce
  bool balance = false;     // shares of each step follow the members' measured throughput
  double slowdown = 1;      // this member computes F times slower (--worker-slowdown)
  uint32_t client = 0;      // --mode hybrid: its worker id at the table buckets (join order)
  uint32_t delay_ms = 0;    // extra milliseconds per step (--worker-delay-ms)
  uint32_t zero_stage =
      0;  // 1: the optimizer's state sharded over the members; 2: the gradient too (--zero-stage)
  uint32_t shard_backups = 0;  // copies of other members' pieces each keeps (--shard-backups)
};

// A member finished a step (applied, or skipped by every member for a non-finite gradient).
struct step_report {
  uint32_t rank = 0;
  uint64_t generation = 0;
  uint32_t epoch = 0;
  uint64_t step = 0;      // global optimizer steps done, this one included
  double loss_sum = 0;    // this member's summed example losses in the step
  uint64_t examples = 0;  // examples this member computed
  bool skipped = false;
  double allreduce_s = 0;         // seconds in this step's collectives
  double exposed_s = 0;           // of those, seconds spent waiting once backward was done
  uint64_t bytes = 0;             // bytes this member sent in them
  double compute_s = 0;           // seconds in gradient computation so far
  double wall_s = 0;              // seconds since the member started training
  uint64_t checksum = 0;          // of its parameters after the step; 0: not compared at this step
  uint64_t step_examples = 0;     // examples of the step, summed over every member
  uint64_t bytes_inter_host = 0;  // of `bytes`, those sent to a member on another host
  bool compressed = false;        // a compressed step of onebit / zero-one Adam (else warmup)
  bool own_non_finite = false;    // this member's own loss or gradient was not finite
};

// The most a rendezvous store holds per value (a rendezvous needs a few hundred bytes per
// member) and in keys.
constexpr size_t max_store_value = size_t{1} << 16;
constexpr size_t max_store_keys = size_t{1} << 16;

// One key of a group's rendezvous store, set or asked for by member `rank` with its token.
struct store_entry {
  uint64_t generation = 0;
  uint32_t rank = 0;
  uint64_t token = 0;
  std::string key;
  std::vector<uint8_t> value;  // empty in a request
};

// -- the standby coordinator ---------------------------------------------------------------------

// What a coordinator knows of one member, as its standby follows it.
struct member_standing {
  std::string name;
  endpoint data;
  bool lost = false, done = false, draining = false, drained = false;
  uint64_t steps = 0, clock = 0;
  double compute_s = 0, wall_s = 0;
};

// Where one bucket lives: its primary's server rank and its chain of backups' server ranks.
struct home_standing {
  uint32_t primary = 0;
  std::vector<uint32_t> backups;
};

// What a data-parallel coordinator (actors/dp/plan/dp_standing.cpp) adds to its standing:
// the group's generation and shape, the members' figures the parameter service has no place for
// (parallel to coordinator_standing::workers) and the report's data-parallel figures.
struct dp_group_standing {
  uint64_t generation = 0;
  uint32_t global_batch = 0;
  std::vector<std::string> hosts;                       // per member: its host label
  std::vector<uint64_t> examples, step_examples;        // per member
  std::vector<uint64_t> applied_examples;               // per epoch: examples of the steps applied
  std::vector<std::pair<std::string, double>> figures;  // the task's own, from an evaluation
  uint64_t allreduce_bytes = 0, bytes_inter_host = 0, bytes_warmup = 0, bytes_compressed = 0;
  uint64_t steps_warmup = 0, steps_compressed = 0, skipped_steps = 0, checksum_mismatches = 0;
  uint64_t checkpoints = 0;
  double allreduce_s = 0, exposed_s = 0, reform_s = 0;
};

// The coordinator's state as its standby follows it (actors/ps/standing.cpp): enough
// to go on once the members rejoin with their handles. Sent after every change of membership
// or placement and every heartbeat interval; the standby keeps the newest. A data-parallel
// coordinator's names its members as workers (clock: the last step each reported) and plan
// holds its progress as its checkpoints do; `dp` is set for it alone.
struct coordinator_standing {
  uint64_t term = 0;
  bool training = false;  // placement done and workers started (before: nothing to take over)
  job_checkpoint plan;    // the work plan, epoch losses, evaluations, training time so far
  std::vector<member_standing> servers, workers;
  std::vector<home_standing> homes;
  // The report so far:
  std::vector<loss_event> losses;
  std::vector<takeover_event> takeovers;
  std::vector<std::string> workers_lost, drained, written;  // written: checkpoint files
  uint64_t restarts = 0, escalations = 0, since_last = 0, chunks_done = 0;
  uint64_t resumed_from_step = 0;
  double recovery_s = 0, resumed_wall_s = 0;
  std::optional<dp_group_standing> dp;
};

// A member of a job that the standby took over registers again: who it is, and what it holds.
// A server names the buckets it hosts (their handles travel beside this); a worker says where
// it is: its batches so far, the chunks it holds, and every chunk it finished (with its summed
// losses), so that the new coordinator knows what the old one heard.
struct rejoin_request {
  role sender = role::worker;
  std::string name;
  uint32_t rank = 0;
  endpoint data;
  std::vector<uint32_t> buckets;  // a server's
  uint64_t steps = 0, clock = 0;
  double compute_s = 0, wall_s = 0;
  bool done = false;  // a worker with no work left
  std::vector<work_chunk> held;
  std::vector<work_chunk> finished;
  std::vector<double> finished_loss;  // parallel to finished
  std::string host;                   // a data-parallel worker's host label
  uint64_t generation = 0;            // a data-parallel worker's newest (pending included)
};

// The header of one piece of a collective of the `actors` backend
// (actors/dp/collective/actor_collective.hpp): values [offset, offset + count) of the `total`
// that call `tag` sends from `from`. The values are raw fp32 bytes beside it in the message.
struct collective_chunk {
  uint64_t generation = 0;
  uint64_t key = 0;
  uint32_t from = 0;
  uint32_t tag = 0;
  uint64_t offset = 0;
  uint64_t total = 0;
  uint64_t count = 0;
};

// The report as the JSON document that `--report FILE` writes.
std::string to_json(const job_report& report);

}  // namespace troupe
