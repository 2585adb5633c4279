#include "flag_table.hpp"

#include "flag_binders.hpp"
#include "troupe/update_rule.hpp"

namespace troupe {

namespace {

using namespace flags;
using scope = flag_scope;

std::string show_consistency(const launch_options& o) {
  using mode = consistency_config::mode;
  const auto& c = o.consistency;
  return c.type == mode::async ? "async"
         : c.type == mode::bsp ? "bsp"
                               : fmt::format("ssp:{}", c.bound);
}

std::string show_compensation(const launch_options& o) {
  using kind = compensation_config::kind;
  const auto& c = o.compensation;
  const char* name = c.type == kind::linear            ? "linear"
                     : c.type == kind::dcasgd          ? "dcasgd"
                     : c.type == kind::dcasgd_adaptive ? "dcasgd-adaptive"
                                                       : "none";
  return c.type == kind::none ? name : fmt::format("{}:{}", name, c.lambda);
}

template <class T>
std::string show_rank_map(const std::map<uint32_t, T>& m) {
  std::string out;
  for (const auto& [rank, x] : m) out += fmt::format("{}{}:{}", out.empty() ? "" : ",", rank, x);
  return out;
}

caf::error parse_compress_skip(const std::string& text, launch_options& o) {
  o.dp.compress_skip = split_list(text);
  for (const auto& name : o.dp.compress_skip)
    if (name.empty() || name.size() > 256)
      return make_error(
          errc::bad_configuration,
          fmt::format("--compress-skip takes tensor names, NAME,NAME..., not '{}'", text));
  return {};
}

std::vector<flag_spec> contract_flags() {
  return {
      custom(
          "role", "ROLE", "embedded (everything in this process) | coordinator | server | worker",
          scope::any, [](const std::string& t, launch_options& o) { return parse_role(t, o.role); },
          [](const launch_options& o) { return to_string(o.role); }),
      custom("listen", "HOST:PORT",
             "coordinator: where nodes join; server: where workers reach its buckets (a "
             "server's default is 127.0.0.1:0, any free port)",
             scope::any,
             parsed_by(&parse_host_port, [](launch_options& o, host_port hp) { o.listen = hp; }),
             [](const launch_options& o) { return to_string(o.listen); }),
      custom("coordinator", "HOST:PORT[,HOST:PORT]",
             "the coordinator a server or worker joins (a list: the first that admits it)",
             scope::any,
             parsed_by(&parse_host_list,
                       [](launch_options& o, std::vector<host_port> l) { o.coordinators = l; }),
             [](const launch_options& o) { return to_string(o.coordinators); }),
      custom(
          "standby-of", "HOST:PORT",
          "coordinator: be the standby of the coordinator there, following its state and "
          "taking over when it is lost (listen on --listen, list both in the members' "
          "--coordinator)",
          scope::any,
          parsed_by(&parse_host_port, [](launch_options& o, host_port hp) { o.standby_of = hp; }),
          [](const launch_options& o) {
            return o.standby_of.port ? to_string(o.standby_of) : std::string{};
          }),
      custom(
          "secret", "S", "cluster secret; proven, never sent", scope::any,
          [](const std::string& t, launch_options& o) {
            o.secret = t;
            return caf::error{};
          },
          [](const launch_options& o) { return o.secret.empty() ? "" : "(set)"; }),
      toggle("insecure",
             "allow --listen on a non-loopback address without --tls-dir (see docs/SECURITY.md)",
             field(&launch_options::insecure)),
      text("tls-dir", "DIR",
           "mutual TLS on every connection: DIR holds ca.pem, node.pem and node.key (troupe-certs "
           "issue writes them); peers without a certificate from that CA are dropped",
           field(&launch_options::tls_dir)),
      toggle("no-data-lane",
             "server and worker: carry pushes and pulls over CAF only, not over the data lane "
             "(a socket beside CAF that servers open without --tls-dir)",
             field(&launch_options::no_data_lane)),
      toggle("insecure-collectives",
             "allow --collective gloo or nccl beside --tls-dir (their transports cannot "
             "authenticate peers)",
             field(&launch_options::insecure_collectives)),
      custom(
          "operator-secret", "S",
          "coordinator without --tls-dir: the secret console actions that change the job "
          "(inject-fault, drain, checkpoint, log) must prove; distinct from --secret",
          scope::any,
          [](const std::string& t, launch_options& o) {
            o.operator_secret = t;
            return caf::error{};
          },
          [](const launch_options& o) { return o.operator_secret.empty() ? "" : "(set)"; }),
      text("name", "NAME", "this node's name in logs and reports", field(&launch_options::name)),
      choice("mode", "MODE",
             "ps (parameter service: servers hold the parameters) | dp (data parallel: every "
             "worker holds a replica and gradients are allreduced) | hybrid (embedding tables "
             "on the servers, dense parameters allreduced) | diloco (the parameter service; each "
             "worker takes --sync-every local steps with --optimizer, then pushes its "
             "pseudo-gradient for the buckets' --outer-optimizer)",
             field(&launch_options::mode),
             {job_mode::ps, job_mode::dp, job_mode::hybrid, job_mode::diloco}),
  };
}

std::vector<flag_spec> data_parallel_flags() {
  return {
      choice(
          "collective", "NAME",
          "the allreduce backend between workers: gloo (Gloo over TCP) | actors (CAF "
          "messages) | nccl (NCCL on one GPU per worker; builds with CUDA)",
          [](auto& o) -> auto& { return o.dp.collective; },
          {collective_kind::gloo, collective_kind::actors, collective_kind::nccl}, scope::dp),
      custom(
          "bucket-mb", "X",
          "gradient bucket cap in MiB, packed in backward order (the first is min(1, X)); in "
          "--mode hybrid the dense part's allreduce",
          scope::dp,
          [](const std::string& t, launch_options& o) {
            if (parse_number("bucket-mb", t, o.dp.bucket_mb) || !(o.dp.bucket_mb > 0) ||
                o.dp.bucket_mb > 1024)
              return make_error(errc::bad_configuration,
                                fmt::format("--bucket-mb must be a number of MiB above 0, at "
                                            "most 1024, not '{}'",
                                            t));
            return caf::error{};
          },
          [](const launch_options& o) { return fmt::format("{}", o.dp.bucket_mb); }),
      toggle(
          "no-overlap", "start reducing only once the whole backward is done",
          [](auto& o) -> auto& { return o.dp.overlap; }, scope::dp, false),
      custom(
          "host-label", "NAME",
          "the host this worker counts as for two-level reduction (default: the host name)",
          scope::dp,
          [](const std::string& t, launch_options& o) {
            if (t.empty() || t.size() > 64)
              return make_error(errc::bad_configuration, "--host-label must be 1 to 64 characters");
            o.dp.host_label = t;
            return caf::error{};
          },
          [](const launch_options& o) { return o.dp.host_label; }),
      choice(
          "reduction", "KIND",
          "flat | two-level (inside each host, then across) | auto (two-level when several "
          "hosts have several workers each)",
          [](auto& o) -> auto& { return o.dp.reduction; },
          {reduction_kind::flat, reduction_kind::two_level, reduction_kind::automatic}, scope::dp),
      number(
          "checksum-every", "N",
          "steps between comparisons of the members' parameter checksums (0: at the end only)",
          [](auto& o) -> auto& { return o.dp.checksum_every; }, scope::dp),
      choice(
          "comm-dtype", "T",
          "fp32 | bf16 | fp16 | int8: how gradient buckets travel (summed in fp32; fp16 scaled "
          "so that nothing overflows), or DiLoCo's pseudo-gradients (int8, --mode diloco only: "
          "a scale per 256 values, what rounding lost sent with the next push)",
          [](auto& o) -> auto& { return o.dp.dtype; },
          {comm_dtype::fp32, comm_dtype::bf16, comm_dtype::fp16, comm_dtype::int8},
          scope::dp_or_diloco),
      custom("compress-skip", "NAME,...",
             "tensors kept at fp32 under --comm-dtype and 1-bit compression (e.g. the first layer)",
             scope::dp, parse_compress_skip,
             [](const launch_options& o) {
               return fmt::format("{}", fmt::join(o.dp.compress_skip, ","));
             }),
      number(
          "freeze-step", "N",
          "onebit-adam, zero-one-adam: full-precision Adam steps before compression (0: 15% "
          "of the job's steps)",
          [](auto& o) -> auto& { return o.dp.freeze_step; }, scope::dp),
      number(
          "var-freeze-step", "N",
          "zero-one-adam: the last step that may refresh the variance (0: as --freeze-step)",
          [](auto& o) -> auto& { return o.dp.var_freeze_step; }, scope::dp),
      number(
          "var-update-scaler", "K",
          "zero-one-adam: variance refreshes at one interval before it doubles",
          [](auto& o) -> auto& { return o.dp.var_update_scaler; }, scope::dp),
      number(
          "local-step-scaler", "N",
          "zero-one-adam: steps after the variance freezes before the interval between "
          "synchronisations doubles (0: 5% of the job's steps)",
          [](auto& o) -> auto& { return o.dp.local_step_scaler; }, scope::dp),
      number(
          "local-step-clipper", "H",
          "zero-one-adam: the most local steps between two synchronisations",
          [](auto& o) -> auto& { return o.dp.local_step_clipper; }, scope::dp),
      number(
          "zero-stage", "S",
          "0: every member holds the optimizer's whole state (as DDP); 1: each holds its "
          "pieces of it (ZeRO stage 1): gradients are reduce-scattered, each member steps its "
          "pieces and the parameters are all-gathered; 2: in addition no member keeps a whole "
          "gradient (ZeRO stage 2): each bucket is reduce-scattered from a reused buffer as "
          "backward fills it",
          [](auto& o) -> auto& { return o.dp.zero_stage; }, scope::dp),
      number(
          "shard-backups", "N",
          "--zero-stage 1 or 2: each member also keeps the pieces of the N members before it, "
          "stepped alike, so that the group re-forms after losing up to N members at once "
          "(0: a loss fails the job)",
          [](auto& o) -> auto& { return o.dp.shard_backups; }, scope::dp),
      toggle(
          "balance",
          "share each step's examples by the members' measured throughput (re-estimated "
          "every few steps)",
          [](auto& o) -> auto& { return o.dp.balance; }, scope::dp),
      custom("worker-slowdown", "I:F",
             "make worker I (numbered as in --worker-delay-ms) F times slower per example "
             "(I:F,J:G...)",
             scope::dp_or_diloco,
             parsed_by(&parse_worker_slowdowns,
                       [](launch_options& o, std::map<uint32_t, double> d) {
                         o.dp.worker_slowdown = std::move(d);
                       }),
             [](const launch_options& o) { return show_rank_map(o.dp.worker_slowdown); }),
  };
}

// --optimizer: a built-in name, or a name an app's rule may have (run_app checks that it has).
caf::error parse_optimizer(const std::string& text, launch_options& o) {
  o.dp.adam = compressed_adam::none;
  for (auto c : {compressed_adam::onebit, compressed_adam::zero_one})
    if (text == to_string(c)) {
      o.optimizer = optimizer_config::kind::adam;
      o.optimizer_rule.clear();
      o.dp.adam = c;
      return {};
    }
  if (auto k = built_in_optimizer(text)) {
    o.optimizer = *k;
    o.optimizer_rule.clear();
    return {};
  }
  if (!valid_rule_name(text))
    return make_error(errc::bad_configuration,
                      fmt::format("--optimizer must be adam, adamw, sgd, momentum, dash, "
                                  "onebit-adam, zero-one-adam or the name of an app's update "
                                  "rule, not '{}'",
                                  text));
  o.optimizer = optimizer_config::kind::app;
  o.optimizer_rule = text;
  return {};
}

caf::error parse_outer_optimizer(const std::string& text, launch_options& o) {
  using kind = optimizer_config::kind;
  for (auto k : {kind::sgd, kind::nesterov, kind::delayed_nesterov})
    if (text == to_string(k)) {
      o.diloco.outer = k;
      return {};
    }
  return make_error(
      errc::bad_configuration,
      fmt::format("--outer-optimizer must be sgd, nesterov or delayed-nesterov, not '{}'", text));
}

std::vector<flag_spec> diloco_flags() {
  return {
      number(
          "sync-every", "H", "local steps (batches) per round: one push of the pseudo-gradient",
          [](auto& o) -> auto& { return o.diloco.sync_every; }, scope::diloco),
      custom("outer-optimizer", "NAME",
             "what the buckets apply to pseudo-gradients: sgd | nesterov | delayed-nesterov "
             "(momentum once per --workers arrivals; default under async and ssp, nesterov "
             "under bsp)",
             scope::diloco, parse_outer_optimizer,
             [](const launch_options& o) {
               return o.diloco.outer ? std::string{to_string(*o.diloco.outer)} : std::string{};
             }),
      custom(
          "outer-lr", "X",
          "the outer optimizer's learning rate (default 0.5 under async and ssp, 0.7 under bsp)",
          scope::diloco,
          [](const std::string& t, launch_options& o) {
            float lr = 0;
            if (auto err = parse_number("outer-lr", t, lr)) return err;
            o.diloco.outer_lr = lr;
            return caf::error{};
          },
          [](const launch_options& o) {
            return o.diloco.outer_lr ? fmt::format("{}", *o.diloco.outer_lr) : std::string{};
          }),
      number(
          "outer-momentum", "MU", "the outer optimizer's momentum (nesterov, delayed-nesterov)",
          [](auto& o) -> auto& { return o.diloco.outer_momentum; }, scope::diloco),
      number(
          "fragments", "F",
          "groups of buckets synced at staggered steps: group k (1..F) at local step k x H / F "
          "of each round, pushed while the next local steps run (streaming DiLoCo)",
          [](auto& o) -> auto& { return o.diloco.fragments; }, scope::diloco),
  };
}

std::vector<flag_spec> job_flags() {
  using kind = optimizer_config::kind;
  return {
      number("workers", "N", "workers in the job", field(&launch_options::workers)),
      number("servers", "M", "parameter servers in the job", field(&launch_options::servers),
             scope::ps),
      number("max-workers", "N", "workers active at once, late joiners included; 0: --workers",
             field(&launch_options::max_workers)),
      number("buckets", "K",
             "parameter buckets (in --mode hybrid the tables' buckets on the servers); 0: one "
             "per server, more for models above 4 MiB per server",
             field(&launch_options::buckets), scope::ps),
      number("epochs", "E", "passes over the training set", field(&launch_options::epochs)),
      number("batch", "B", "examples per worker step", field(&launch_options::batch)),
      number("lr", "X", "learning rate", field(&launch_options::lr)),
      custom("optimizer", "NAME",
             "adam | adamw | sgd | momentum (heavy ball, --momentum) | dash (block Shampoo) | "
             "onebit-adam | zero-one-adam (--mode dp: 1-bit compressed Adam), or an update "
             "rule the app registers; --mode diloco: the inner optimizer each worker steps "
             "locally, adam, adamw (its default there), sgd or momentum",
             scope::any, parse_optimizer,
             [](const launch_options& o) {
               if (o.dp.adam != compressed_adam::none) return std::string{to_string(o.dp.adam)};
               return o.optimizer == kind::app ? o.optimizer_rule
                                               : std::string{to_string(o.optimizer)};
             }),
      number("momentum", "MU", "momentum coefficient of --optimizer momentum",
             field(&launch_options::momentum)),
      custom("consistency", "MODE", "async | ssp:S (at most S clocks ahead of the slowest) | bsp",
             scope::ps,
             parsed_by(&parse_consistency,
                       [](launch_options& o, consistency_config c) { o.consistency = c; }),
             show_consistency),
      custom("dc", "KIND", "delay compensation: none | linear:L | dcasgd:L | dcasgd-adaptive:L0",
             scope::ps,
             parsed_by(&parse_compensation,
                       [](launch_options& o, compensation_config c) { o.compensation = c; }),
             show_compensation),
      toggle("lr-staleness", "scale each update by 1 / (1 + its staleness)",
             field(&launch_options::lr_staleness), scope::ps),
      number("clip", "C", "clip each embedding row's gradient to L2 norm C (0: off)",
             field(&launch_options::clip)),
      number("sync-threshold", "X", "a pull sends only rows that moved more than X (0: all)",
             field(&launch_options::sync_threshold), scope::ps),
      text("export-dir", "DIR",
           "each server writes its embedding tables' changed rows here for serving "
           "(troupe.table.read_deltas), every --export-every seconds",
           field(&launch_options::export_dir), scope::ps),
      number("export-every", "S", "seconds between files of changed rows (--export-dir)",
             field(&launch_options::export_every), scope::ps),
      number("accumulate", "N",
             "batches whose gradients are averaged into one push (--mode dp: micro-batches of "
             "--batch averaged before one allreduce)",
             field(&launch_options::accumulate)),
      toggle("prefetch", "pull the next values while a batch computes",
             field(&launch_options::prefetch), scope::ps),
      custom(
          "compress", "KIND", "none | sign (1-bit pushes with error feedback)", scope::ps,
          [](const std::string& t, launch_options& o) {
            if (t != "none" && t != "sign")
              return make_error(errc::bad_configuration,
                                fmt::format("--compress must be none or sign, not '{}'", t));
            o.compress_signs = t == "sign";
            return caf::error{};
          },
          [](const launch_options& o) { return o.compress_signs ? "sign" : "none"; }),
      custom("worker-delay-ms", "I:D",
             "make worker I slower by D ms per batch, per step under --mode dp (I:D,J:E...)",
             scope::any,
             parsed_by(&parse_worker_delays,
                       [](launch_options& o, std::map<uint32_t, uint32_t> d) {
                         o.worker_delay_ms = std::move(d);
                       }),
             [](const launch_options& o) { return show_rank_map(o.worker_delay_ms); }),
      number("weight-decay", "WD",
             "weight decay: L2 in the gradient for adam, sgd and momentum; decoupled for adamw "
             "and dash",
             field(&launch_options::weight_decay)),
      number("seed", "S", "seed of initialisation and data order", field(&launch_options::seed)),
  };
}

std::vector<flag_spec> node_flags() {
  return {
      text("report", "FILE", "write the job report (JSON) here when the job ends",
           field(&launch_options::report)),
      number("threads", "N", "actor scheduler threads; 0: one per core",
             field(&launch_options::threads)),
      number("blas-threads", "N",
             "OpenBLAS threads per process; 0: cores / workers in it (a worker process: cores / "
             "the job's workers on its host)",
             field(&launch_options::blas_threads)),
      custom(
          "log-level", "LEVEL", "error | warn | info | debug", scope::any,
          [](const std::string& t, launch_options& o) {
            if (parse_log_level(t, o.level)) return caf::error{};
            return make_error(errc::bad_configuration,
                              fmt::format("--log-level: unknown level '{}'", t));
          },
          [](const launch_options& o) { return std::string{to_string(o.level)}; }),
      duration("join-timeout", "SECONDS", "how long a node tries to reach the coordinator",
               field(&launch_options::join_timeout)),
      duration("request-timeout", "SECONDS", "timeout of every request between actors",
               field(&launch_options::request_timeout)),
      duration("heartbeat-ms", "MS",
               "how often a server or worker tells the coordinator it is alive",
               field(&launch_options::heartbeat_interval)),
      duration("heartbeat-timeout-ms", "MS",
               "silence after which the coordinator declares a node lost",
               field(&launch_options::heartbeat_timeout)),
      duration("takeover-timeout-ms", "MS",
               "silence of the coordinator after which its standby takes over, and members "
               "look for it (time the watching process was running)",
               field(&launch_options::takeover_timeout)),
      duration("stall-timeout", "SECONDS",
               "the stall watchdog: a job with no progress (a batch handed out, a push or step "
               "applied, an evaluation, a generation formed) for max(SECONDS, 10 x its slowest "
               "step) ends as stalled, with what each member was doing (coordinator; 0: off)",
               field(&launch_options::stall_timeout)),
      number("max-consecutive-skipped-steps", "N",
             "fail the job after N skipped (non-finite) steps in a row: a ps worker's own, a dp "
             "or hybrid group's (coordinator; 0: no limit)",
             field(&launch_options::max_consecutive_skipped_steps)),
      number("max-restarts", "N",
             "restarts a node's supervisor allows within the period; one more escalates",
             field(&launch_options::max_restarts)),
      duration("restart-period-ms", "MS", "the period of --max-restarts",
               field(&launch_options::restart_period)),
      number(
          "replication", "R",
          "copies of each bucket on different servers (a primary and a chain of backups; R <= 3)",
          field(&launch_options::replication), scope::ps),
      text("checkpoint-dir", "DIR", "write checkpoints here (coordinator)",
           field(&launch_options::checkpoint_dir)),
      number("checkpoint-every", "N", "batches between checkpoints; 0: one per epoch",
             field(&launch_options::checkpoint_every)),
      number("checkpoint-keep", "N", "checkpoints kept in --checkpoint-dir",
             field(&launch_options::checkpoint_keep)),
      text("resume", "DIR", "continue from the newest good checkpoint in DIR (coordinator)",
           field(&launch_options::resume)),
      custom(
          "metrics-port", "P",
          "serve Prometheus metrics at http://HOST:P/metrics, HOST as in --listen (0: any "
          "free port)",
          scope::any,
          [](const std::string& t, launch_options& o) {
            return parse_number("metrics-port", t, o.metrics_port);
          },
          [](const launch_options& o) {
            return o.metrics_port < 0 ? std::string{} : std::to_string(o.metrics_port);
          }),
      custom(
          "dashboard-port", "P",
          "serve the job's live web dashboard at http://HOST:P/ (coordinator), HOST as in "
          "--listen (0: any free port)",
          scope::any,
          [](const std::string& t, launch_options& o) {
            return parse_number("dashboard-port", t, o.dashboard_port);
          },
          [](const launch_options& o) {
            return o.dashboard_port < 0 ? std::string{} : std::to_string(o.dashboard_port);
          }),
      number("port", "P",
             "under srun: the coordinator's port (default 10000 + 64 x (SLURM_JOB_ID mod 800)); "
             "servers listen on the ports after it, by SLURM_LOCALID",
             field(&launch_options::port)),
      text("tensorboard", "DIR",
           "write the job's figures as TensorBoard event files here (coordinator; a standby "
           "writes to the same run)",
           field(&launch_options::tensorboard)),
      number(
          "warn-update-variance", "X", "diag warns above this update variance",
          [](auto& o) -> auto& { return o.warn.update_variance; }),
      number(
          "warn-loss-oscillation", "X", "diag warns above this mean |loss change| per chunk",
          [](auto& o) -> auto& { return o.warn.loss_oscillation; }),
      number(
          "warn-update-ratio", "X", "diag warns below this share of gradients applied",
          [](auto& o) -> auto& { return o.warn.update_ratio; }),
  };
}

std::vector<flag_spec> dash_flags() {
  return {
      number("dash-block", "B", "--optimizer dash: block size (matrices are cut into B x B blocks)",
             field(&launch_options::dash_block)),
      number("dash-freq", "F", "--optimizer dash: steps between inverse 4th roots",
             field(&launch_options::dash_freq)),
      choice("dash-solver", "S", "--optimizer dash: evd | cn | ndb | cheb (inverse-root solver)",
             field(&launch_options::dash_solver),
             {root_solver::evd, root_solver::coupled_newton, root_solver::newton_db,
              root_solver::chebyshev}),
      choice("dash-storage", "T",
             "--optimizer dash: fp32 | bf16 | fp16 statistics (fp32 arithmetic)",
             field(&launch_options::dash_storage),
             {dash_storage::fp32, dash_storage::bf16, dash_storage::fp16}),
      toggle("dash-nesterov", "--optimizer dash: precondition Adam's look-ahead moment",
             field(&launch_options::dash_nesterov)),
      choice("dash-scaling", "S",
             "--optimizer dash: power | frobenius (bound on lambda_max for roots)",
             field(&launch_options::dash_scaling),
             {root_scaling::power_iteration, root_scaling::frobenius}),
      choice("dash-device", "D",
             "--optimizer dash, servers: cpu | gpu (buckets step DASH on this node's GPU 0; "
             "needs cn and power)",
             field(&launch_options::dash_device), {dash_device_kind::cpu, dash_device_kind::gpu},
             scope::ps),
      toggle("help", "print this help", field(&launch_options::help)),
  };
}

}  // namespace

const std::vector<flag_spec>& flag_table() {
  static const std::vector<flag_spec> table = [] {  // a constant, built once
    std::vector<flag_spec> all;
    for (auto part : {contract_flags(), data_parallel_flags(), diloco_flags(), job_flags(),
                      node_flags(), dash_flags()})
      for (auto& f : part) all.push_back(std::move(f));
    return all;
  }();
  return table;
}

caf::error parse_switch(const std::string& flag, const std::string& text, bool& out) {
  if (text == "true" || text == "1" || text == "yes")
    out = true;
  else if (text == "false" || text == "0" || text == "no")
    out = false;
  else
    return make_error(errc::bad_configuration,
                      fmt::format("--{} takes no value, or true/false, not '{}'", flag, text));
  return {};
}

caf::error parse_role(const std::string& text, node_role& out) {
  for (node_role r :
       {node_role::embedded, node_role::coordinator, node_role::server, node_role::worker})
    if (text == to_string(r) || (text.empty() && r == node_role::embedded)) {
      out = r;
      return {};
    }
  return make_error(errc::bad_configuration,
                    fmt::format("--role must be coordinator, server or worker, not '{}'", text));
}

}  // namespace troupe
