// Launch options of every Troupe binary: the contract flags (--role, --listen, --coordinator,
// --secret), the job flags, and flags an app declares for itself. Each flag --foo-bar can also
// come from the environment as TROUPE_FOO_BAR; torchrun's MASTER_ADDR, MASTER_PORT, RANK and
// WORLD_SIZE map onto role and addresses, and so do srun's SLURM_PROCID, SLURM_NTASKS,
// SLURM_STEP_NODELIST, SLURM_LOCALID and SLURM_JOB_ID (runtime/src/slurm.hpp).
// Precedence: flag > TROUPE_* > torchrun or srun > default.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "troupe/log.hpp"
#include "troupe/values.hpp"

namespace troupe {

enum class node_role { embedded, coordinator, server, worker };

std::string to_string(node_role r);

struct host_port {
  std::string host;
  uint16_t port = 0;
};

std::string to_string(const host_port& x);
std::string to_string(const std::vector<host_port>& xs);  // "A:1,B:2"

// A flag an app adds to the common ones, e.g. {"data", "DIR", "Fashion-MNIST folder", "/usr/..."}
// or {"fields", "F", "feature fields", "8", app_flag::whole}. A number or whole flag is checked
// when the flags are parsed (its value and its default): a bad one is an error naming it.
struct app_flag {
  enum kind : uint8_t { text, number, whole };  // number: a finite real >= 0; whole: an integer
  std::string name;
  std::string value_name;  // empty: a switch that takes no value
  std::string help;
  std::string default_value;
  kind type = text;
};

// When the console's `diag` (and the coordinator's log) warns about asynchrony hurting.
struct diag_thresholds {
  double update_variance = 0.1;   // above: pushes disagree in size (see bucket_store)
  double loss_oscillation = 0.5;  // above: successive chunk losses jump by this much on average
  double update_ratio = 0.9;      // below: too few received gradients are applied
};

// --reduction: flat | two-level (inside each host, then across) | auto.
enum class reduction_kind : uint8_t { flat, two_level, automatic };
// --dash-device: where this node's buckets step DASH.
enum class dash_device_kind : uint8_t { cpu, gpu };
// --mode: the parameter service (servers hold the parameters), data parallel (every worker
// holds a replica and gradients are allreduced), hybrid (a task's embedding tables on the
// servers, its dense parameters replicated on the workers and allreduced), or diloco (the
// parameter service, each worker taking --sync-every local steps between its pushes of a
// pseudo-gradient, which the buckets apply with the outer optimizer).
enum class job_mode : uint8_t { ps, dp, hybrid, diloco };
// The names the flags use: flat | two-level | auto, cpu | gpu, ps | dp | hybrid | diloco.
const char* to_string(reduction_kind k);
const char* to_string(job_mode m);
const char* to_string(dash_device_kind k);

// --mode dp: what a data-parallel job adds (see actors/dp/trainer/dp_trainer.hpp).
struct dp_options {
  collective_kind collective = collective_kind::gloo;  // between members
  double bucket_mb = 25;            // gradient bucket cap in MiB; the first is min(1, this)
  bool overlap = true;              // --no-overlap: reduce only once backward is done
  uint32_t checksum_every = 100;    // steps between parameter checksum comparisons (0: end only)
  bool coordinator_trains = false;  // torchrun's RANK 0: the coordinator's process runs a worker
  std::string host_label;           // the host this worker counts as (default: the host name)
  reduction_kind reduction = reduction_kind::automatic;  // auto: two-level when hosts repeat
  comm_dtype dtype = comm_dtype::fp32;                   // --comm-dtype
  std::vector<std::string> compress_skip;  // tensors kept at fp32 under any compression
  compressed_adam adam = compressed_adam::none;
  uint64_t freeze_step = 0;      // 1-bit / 0/1 Adam: full-precision steps first (0: 15% of the job)
  uint64_t var_freeze_step = 0;  // 0/1 Adam: the last step that may refresh the variance
  uint32_t var_update_scaler = 16;   // 0/1 Adam: variance refreshes before their interval doubles
  uint64_t local_step_scaler = 0;    // 0/1 Adam: steps before the local interval doubles (0: 5%)
  uint32_t local_step_clipper = 16;  // 0/1 Adam: the most steps between two synchronisations
  bool balance = false;  // share each step's examples by the members' measured throughput
  std::map<uint32_t, double> worker_slowdown;  // worker -> factor slower per example
  // --zero-stage: 0 every member holds the optimizer's whole state; 1 each holds its pieces of
  // it (ZeRO stage 1: gradients reduce-scattered, parameters all-gathered after the step)
  uint32_t zero_stage = 0;
  uint32_t shard_backups = 1;  // --shard-backups: copies of others' pieces each member keeps
};

// --mode diloco: what local rounds add (docs/training.md#diloco). The inner optimizer is
// --optimizer (default adamw here) with --lr, --momentum and --weight-decay.
struct diloco_options {
  uint32_t sync_every = 100;  // --sync-every H: local steps per round (one push per round)
  // --outer-optimizer sgd | nesterov | delayed-nesterov; none: delayed-nesterov under async and
  // ssp (whose pseudo-gradients arrive one at a time, stale), nesterov under bsp.
  std::optional<optimizer_config::kind> outer;
  // --outer-lr; none: 0.5 under async and ssp, 0.7 under bsp (docs/training.md#diloco has the
  // measurements these defaults come from).
  std::optional<float> outer_lr;
  float outer_momentum = 0.5f;  // --outer-momentum
  uint32_t fragments = 1;       // --fragments F: groups of buckets synced at staggered steps
};

struct launch_options {
  node_role role = node_role::embedded;
  job_mode mode = job_mode::ps;
  bool data_parallel() const { return mode == job_mode::dp || hybrid(); }  // workers allreduce
  bool hybrid() const { return mode == job_mode::hybrid; }  // and servers hold the tables
  // Servers hold every parameter and workers push to them (ps, diloco).
  bool parameter_service() const { return mode == job_mode::ps || diloco_mode(); }
  bool diloco_mode() const { return mode == job_mode::diloco; }
  dp_options dp;
  diloco_options diloco;
  host_port listen{"127.0.0.1", 7600};
  // --coordinator: where a member joins, in order of preference (a coordinator and its
  // standbys); the first that admits it is its coordinator.
  std::vector<host_port> coordinators{{"127.0.0.1", 7600}};
  std::string secret;
  bool insecure = false;  // allows --listen on an address other than loopback without TLS
  std::string tls_dir;    // --tls-dir: ca.pem, node.pem, node.key; every connection mutual TLS
  bool insecure_collectives = false;  // allows gloo or nccl (unauthenticated) beside --tls-dir
  bool no_data_lane = false;          // pushes and pulls over CAF only (actors/lane: none)
  std::string operator_secret;        // proves console actions that change a job, without TLS
  std::string name;                   // this node's name in logs and the report; derived when empty
  uint32_t workers = 2;
  uint32_t max_workers = 0;  // workers active at once, late joiners included; 0: --workers
  uint32_t servers = 2;
  uint32_t buckets = 0;  // 0: one per server, more above 4 MiB of values per server
  uint32_t epochs = 3;
  uint32_t batch = 64;
  float lr = 1e-3f;
  optimizer_config::kind optimizer = optimizer_config::kind::adam;
  std::string optimizer_rule;  // optimizer app: the name of the app's rule (app_description::rules)
  uint32_t dash_block = 128;   // dash: block size B
  uint32_t dash_freq = 10;     // dash: steps between inverse roots
  root_solver dash_solver = root_solver::coupled_newton;
  troupe::dash_storage dash_storage = troupe::dash_storage::fp32;  // the statistics' storage
  bool dash_nesterov = false;
  root_scaling dash_scaling = root_scaling::power_iteration;
  dash_device_kind dash_device = dash_device_kind::cpu;  // this node's buckets
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool lr_staleness = false;    // scale each update by 1 / (1 + staleness)
  float clip = 0.0f;            // clip each embedding row's gradient to this L2 norm (0: off)
  float sync_threshold = 0.0f;  // a pull sends only rows that moved more than this (0: off)
  // Where each primary bucket writes its tables' changed rows, every export_every seconds
  // (troupe/table_deltas.hpp); empty: nowhere.
  std::string export_dir;
  uint32_t export_every = 10;
  consistency_config consistency;
  compensation_config compensation;
  uint32_t accumulate = 1;                       // batches averaged into one push
  bool prefetch = false;                         // pull the next values while a batch computes
  bool compress_signs = false;                   // --compress sign: 1-bit pushes, error feedback
  std::map<uint32_t, uint32_t> worker_delay_ms;  // worker rank -> extra ms per batch
  uint64_t seed = 1;
  std::string report;
  unsigned threads = 0;       // CAF scheduler threads; 0: one per core
  unsigned blas_threads = 0;  // OpenBLAS threads per process; 0: cores / local workers
  log_level level = log_level::info;
  std::chrono::seconds join_timeout{30};
  std::chrono::seconds request_timeout{30};
  std::chrono::milliseconds heartbeat_interval{500};  // how often nodes say they are alive
  std::chrono::milliseconds heartbeat_timeout{2000};  // silence after which a node is lost
  // --standby-of: this coordinator is the standby of the one there (port 0: none); it takes
  // over when that one goes down or is silent for --takeover-timeout-ms of its running time.
  host_port standby_of{"", 0};
  std::chrono::milliseconds takeover_timeout{10000};
  // The stall watchdog (actors/supervision/failure/stall_watch.hpp): a job with no progress for
  // max(this, 10 x its slowest step) ends as stalled; 0: off.
  std::chrono::seconds stall_timeout{600};
  // A job fails after this many skipped (non-finite) steps in a row: a ps worker's own, or a
  // dp / hybrid group's; 0: no limit.
  uint64_t max_consecutive_skipped_steps = 0;
  uint32_t max_restarts = 3;  // per node supervisor, within the period
  std::chrono::milliseconds restart_period{10000};
  uint32_t replication = 1;       // copies of each bucket, on different servers
  std::string checkpoint_dir;     // where checkpoints go (none: no checkpoints)
  uint64_t checkpoint_every = 0;  // batches between checkpoints (0 with a dir: once per epoch)
  uint32_t checkpoint_keep = 3;   // checkpoints kept
  std::string resume;             // continue from the newest good checkpoint in this directory
  int32_t metrics_port = -1;      // serve Prometheus metrics here (0: any free port; -1: off)
  int32_t dashboard_port = -1;    // the coordinator's web dashboard (0: any free port; -1: off)
  std::string tensorboard;        // the coordinator writes TensorBoard event files here
  uint16_t port = 0;              // under srun: the coordinator's port (0: from SLURM_JOB_ID)
  diag_thresholds warn;           // --warn-update-variance, --warn-loss-oscillation, ...
  bool help = false;
  std::map<std::string, std::string> app;  // values of the app's own flags

  // The value of an app flag (its default when not given).
  const std::string& app_value(const std::string& flag) const;

  // An app flag as a number: a finite real in [0, max], whole when `whole`; otherwise
  // errc::bad_configuration naming the flag. app_number<T> reads it as T (integers whole).
  caf::expected<double> app_real(const std::string& flag, bool whole, double max) const;
  template <class T>
  caf::expected<T> app_number(const std::string& flag) const {
    auto value =
        app_real(flag, std::is_integral_v<T>, static_cast<double>(std::numeric_limits<T>::max()));
    if (!value) return std::move(value.error());
    return static_cast<T>(*value);
  }
};

// Looks up an environment variable; tests pass their own.
using env_lookup = std::function<std::optional<std::string>(const std::string&)>;
env_lookup process_environment();

// The effective value of every flag, common and the app's, by name, as a flag would give it
// (the secret shows as "(set)"): the report's `settings`.
std::vector<std::pair<std::string, std::string>> flag_settings(const launch_options& o);

// Every common flag's name, and whether it is a switch (no value): for fronts that take
// options by name, as Python's troupe.run(task, mode="dp") does.
std::vector<std::pair<std::string, bool>> common_flags();

// `text` as the value of the common flag `flag` alone (others at their defaults): an error
// naming the flag when it cannot be parsed, errc::bad_configuration for an unknown flag.
// Checks between flags (a role's needs, a flag of the other mode) wait for the whole line.
caf::error check_flag_value(const std::string& flag, const std::string& text);

// `defaults` replaces the defaults of common flags for one app (lowest precedence).
caf::expected<launch_options> parse_launch_options(
    const std::vector<std::string>& args, const env_lookup& env,
    const std::vector<app_flag>& app_flags = {},
    const std::map<std::string, std::string>& defaults = {});

// The --help text: usage line, every flag with its default, the environment variables.
std::string launch_usage(const std::string& program, const std::string& summary,
                         const std::vector<app_flag>& app_flags,
                         const std::map<std::string, std::string>& defaults = {});

caf::expected<host_port> parse_host_port(const std::string& text);
// HOST:PORT[,HOST:PORT...]: at least one, each checked.
caf::expected<std::vector<host_port>> parse_host_list(const std::string& text);

// Slurm's hostlist form, as in SLURM_STEP_NODELIST: "n[01-04,07],gpu3" is n01 n02 n03 n04 n07
// gpu3 (numbers keep the first bound's zero padding; several brackets in one name multiply).
caf::expected<std::vector<std::string>> expand_hostlist(const std::string& text);

// Under srun without --port, the port a job's coordinator listens on: 10000 + 64 x (job id mod
// 800), which leaves 63 ports after it for the job's tasks on one host.
uint16_t slurm_port_of_job(uint64_t job_id);

// The update rule every bucket (or data-parallel replica) applies, from --optimizer, --lr,
// --momentum, --weight-decay, --lr-staleness and the --dash-* flags; under --mode diloco the
// outer optimizer instead (outer_optimizer_from).
optimizer_config optimizer_from(const launch_options& o);
// --mode diloco: the rule each worker steps locally (--optimizer and its flags), and the one
// the buckets apply to pseudo-gradients (--outer-optimizer, --outer-lr, --outer-momentum; a
// delayed-nesterov's momentum steps once per --workers arrivals).
optimizer_config inner_optimizer_from(const launch_options& o);
optimizer_config outer_optimizer_from(const launch_options& o);

// "async", "ssp:S" or "bsp".
caf::expected<consistency_config> parse_consistency(const std::string& text);

// "none", "linear:L", "dcasgd:L" or "dcasgd-adaptive:L0".
caf::expected<compensation_config> parse_compensation(const std::string& text);

// The items of a comma-separated flag value ("a,b" -> {"a", "b"}; "a,,b" keeps the empty one,
// for the caller to refuse; a trailing comma ends the list), for list flags, an app's too.
std::vector<std::string> split_list(const std::string& text);

// "W1,W2,...": layer widths, each 1 to `most` (an app's --hidden, --tower); "" is none. A bad
// item is errc::bad_configuration naming `flag`.
caf::expected<std::vector<uint32_t>> parse_widths(const std::string& flag, const std::string& text,
                                                  uint32_t most);

// "i:D[,j:E...]": worker rank i is slower by D milliseconds per batch.
caf::expected<std::map<uint32_t, uint32_t>> parse_worker_delays(const std::string& text);

// "i:F[,j:G...]": worker rank i is F (1 to 1000) times slower per example (--mode dp).
caf::expected<std::map<uint32_t, double>> parse_worker_slowdowns(const std::string& text);

bool is_loopback(const std::string& host);

}  // namespace troupe
