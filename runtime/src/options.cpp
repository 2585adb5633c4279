#include "troupe/options.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "flag_table.hpp"
#include "slurm.hpp"
#include "troupe/error.hpp"
#include "troupe/tls.hpp"

namespace troupe {

namespace {

std::string env_name(const std::string& flag) {
  std::string out = "TROUPE_";
  for (char c : flag) out += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return out;
}

// Collects raw values: defaults, then torchrun's or srun's variables, then TROUPE_*, then
// flags (later wins). `switches`: every flag's name, and whether it is a switch.
caf::expected<std::map<std::string, std::string>> collect(
    const std::vector<std::string>& args, const env_lookup& env,
    const std::map<std::string, bool>& switches,
    const std::map<std::string, std::string>& defaults) {
  std::map<std::string, std::string> given;  // TROUPE_* and flags
  for (const auto& [name, is_switch] : switches)
    if (auto v = env(env_name(name))) given[name] = *v;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0)
      return make_error(errc::bad_configuration, fmt::format("unexpected argument '{}'", arg));
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto it = switches.find(name);
    if (it == switches.end())
      return make_error(errc::bad_configuration,
                        fmt::format("unknown flag --{} (see --help)", name));
    if (it->second) {
      given[name] = inline_value.value_or("true");  // a switch: --x, --x=true, --x=false
    } else if (inline_value) {
      given[name] = *inline_value;
    } else if (i + 1 < args.size()) {
      given[name] = args[++i];
    } else {
      return make_error(errc::bad_configuration, fmt::format("--{} needs a value", name));
    }
  }
  std::map<std::string, std::string> values = defaults;
  if (auto addr = env("MASTER_ADDR")) {
    const std::string port = env("MASTER_PORT").value_or("7600");
    values["torchrun-master"] = *addr + ":" + port;
    values["coordinator"] = *addr + ":" + port;
  }
  if (auto rank = env("RANK")) values["torchrun-rank"] = *rank;
  if (auto world = env("WORLD_SIZE")) values["torchrun-world"] = *world;
  const auto port = given.count("port") ? given["port"] : std::string{};
  if (auto err = collect_slurm(env, port, values)) return err;
  for (auto& [name, value] : given) values[name] = std::move(value);
  return values;
}

// A flag of one job given to the other: the parameter service's flags in --mode dp, the
// data-parallel ones in --mode ps.
caf::error check_scopes(const std::map<std::string, std::string>& given, const launch_options& o) {
  for (const auto& f : flag_table()) {
    if (!given.count(f.name)) continue;
    if (f.scope == flag_scope::dp && !o.data_parallel())
      return make_error(errc::bad_configuration, fmt::format("--{} is for --mode dp", f.name));
    if (f.scope == flag_scope::diloco && !o.diloco_mode())
      return make_error(errc::bad_configuration, fmt::format("--{} is for --mode diloco", f.name));
    if (f.scope == flag_scope::dp_or_diloco && o.mode == job_mode::ps)
      return make_error(errc::bad_configuration,
                        fmt::format("--{} is for --mode dp, hybrid or diloco", f.name));
    if (f.scope == flag_scope::ps && o.mode == job_mode::dp)
      return make_error(errc::bad_configuration,
                        fmt::format("--{} belongs to the parameter service (--mode ps); a "
                                    "data-parallel job has no servers",
                                    f.name));
  }
  return {};
}

// Maps torchrun's RANK / WORLD_SIZE onto a role: rank 0 coordinates, ranks 1..servers serve,
// the rest are workers; WORLD_SIZE sets --workers when it is not given.
caf::error apply_torchrun(std::map<std::string, std::string>& values, launch_options& out) {
  if (!values.count("torchrun-rank") || values.count("role")) return {};
  uint32_t rank = 0;
  if (auto err = parse_number("RANK", values["torchrun-rank"], rank)) return err;
  if (out.data_parallel()) {  // rank 0 coordinates and trains; WORLD_SIZE counts trainers
    out.role = rank == 0 ? node_role::coordinator : node_role::worker;
    out.dp.coordinator_trains = rank == 0;
    if (values.count("torchrun-world") && !values.count("workers"))
      if (auto err = parse_number("WORLD_SIZE", values["torchrun-world"], out.workers)) return err;
    return {};
  }
  out.role = rank == 0             ? node_role::coordinator
             : rank <= out.servers ? node_role::server
                                   : node_role::worker;
  if (values.count("torchrun-world") && !values.count("workers")) {
    uint32_t world = 0;
    if (auto err = parse_number("WORLD_SIZE", values["torchrun-world"], world)) return err;
    if (world < out.servers + 2)
      return make_error(errc::bad_configuration,
                        fmt::format("WORLD_SIZE {} leaves no worker beside the coordinator and "
                                    "{} servers",
                                    world, out.servers));
    out.workers = world - 1 - out.servers;
  }
  return {};
}

// What may listen where, with or without TLS (docs/SECURITY.md).
caf::error validate_security(const launch_options& o) {
  auto bad = [](const std::string& what) { return make_error(errc::bad_configuration, what); };
  const bool tls = !o.tls_dir.empty();
  if (o.metrics_port >= 0 && !tls && !is_loopback(o.listen.host))
    return bad(
        "--metrics-port serves on --listen's host, which is not a loopback address: plain HTTP "
        "is served on loopback only; add --tls-dir DIR to serve HTTPS (docs/SECURITY.md)");
  if (o.dashboard_port >= 0 && !tls && !is_loopback(o.listen.host))
    return bad(
        "--dashboard-port serves on --listen's host, which is not a loopback address: plain "
        "HTTP is served on loopback only; add --tls-dir DIR to serve HTTPS (docs/SECURITY.md)");
  const bool listens = o.role == node_role::coordinator || o.role == node_role::server ||
                       (o.role == node_role::worker && o.data_parallel());
  if (listens && !tls && !o.insecure && !is_loopback(o.listen.host))
    return bad(fmt::format(
        "--listen {} is not a loopback address: add --tls-dir DIR for mutual TLS (troupe-certs "
        "makes one), or --insecure to listen without it (docs/SECURITY.md)",
        to_string(o.listen)));
  const auto collective = o.dp.collective;
  if (tls && o.data_parallel() && collective != collective_kind::actors && !o.insecure_collectives)
    return bad(fmt::format(
        "--collective {}: its transport ({}) neither authenticates nor encrypts, which --tls-dir "
        "promises; use --collective actors (the default with --tls-dir: the group's messages "
        "travel over the nodes' TLS connections), or add --insecure-collectives",
        to_string(collective),
        collective == collective_kind::gloo ? "Gloo's TCP pairs" : "NCCL's socket bootstrap"));
  if (!o.operator_secret.empty() && o.operator_secret == o.secret)
    return bad("--operator-secret must differ from the cluster secret (--secret)");
  if (tls)
    if (auto checked = tls::check_dir(o.tls_dir); !checked) return std::move(checked.error());
  return {};
}

// --zero-stage: what sharded optimizer state takes (docs/training.md#sharded-optimizer-state).
// Every combination it does not take yet is refused here, at the start.
caf::error validate_zero_stage(const launch_options& o) {
  auto bad = [&](const std::string& what) {
    return make_error(errc::bad_configuration,
                      fmt::format("--zero-stage {}: {}", o.dp.zero_stage, what));
  };
  if (o.dp.zero_stage == 0) return {};
  if (o.dp.zero_stage > 2)
    return make_error(errc::bad_configuration,
                      fmt::format("--zero-stage must be 0, 1 or 2, not {} (stage 3, sharded "
                                  "parameters, is out of scope)",
                                  o.dp.zero_stage));
  if (o.dp.adam != compressed_adam::none)
    return bad(fmt::format(
        "--optimizer {} compresses every member's whole momentum, which sharded state does not "
        "hold (DeepSpeed refuses the pair too); use --zero-stage 0",
        to_string(o.dp.adam)));
  using kind = optimizer_config::kind;
  if (o.optimizer == kind::dash || o.optimizer == kind::app)
    return bad(fmt::format(
        "--optimizer {} steps whole tensors, and a member holds pieces of them; use adam, adamw, "
        "momentum or sgd, or --zero-stage 0",
        o.optimizer == kind::dash ? "dash" : o.optimizer_rule));
  if (o.dp.zero_stage == 2 && o.accumulate > 1)
    return bad(
        "--accumulate sums micro-batches into a whole gradient, which stage 2 does not keep; "
        "use --zero-stage 1 (sharded optimizer state, one gradient buffer)");
  return {};
}

// --mode diloco's flags, and what it does not take (docs/training.md#diloco).
caf::error validate_diloco(const launch_options& o) {
  auto bad = [](std::string text) {
    return make_error(errc::bad_configuration, "--mode diloco: " + std::move(text));
  };
  if (o.dp.dtype == comm_dtype::int8 && !o.diloco_mode())
    return make_error(errc::bad_configuration,
                      "--comm-dtype int8 is for --mode diloco: an allreduce sums the values it "
                      "sends, and int8 blocks with their own scales do not sum");
  if (!o.diloco_mode()) return {};
  using kind = optimizer_config::kind;
  if (o.diloco.sync_every == 0 || o.diloco.sync_every > 1000000)
    return bad("--sync-every must be 1 to 1000000");
  if (o.diloco.fragments == 0 || o.diloco.fragments > o.diloco.sync_every)
    return bad("--fragments must be 1 to --sync-every (each fragment syncs at its own step)");
  if (o.buckets != 0 && o.buckets < o.diloco.fragments)
    return bad("--fragments needs at least as many --buckets (a fragment is a group of them)");
  if (o.diloco.outer_lr && !(*o.diloco.outer_lr > 0)) return bad("--outer-lr must be positive");
  if (o.diloco.outer_momentum < 0 || o.diloco.outer_momentum >= 1)
    return bad("--outer-momentum must be in [0, 1)");
  if (o.compensation.type != compensation_config::kind::none)
    return bad(
        "--dc corrects a gradient for the values it was computed at; a pseudo-gradient is H "
        "local steps, which that term does not describe");
  if (o.optimizer == kind::dash || o.optimizer == kind::app || o.dp.adam != compressed_adam::none)
    return bad("the inner --optimizer must be adam, adamw, sgd or momentum");
  if (o.prefetch) return bad("--prefetch: a round starts from the values its push brought back");
  if (o.compress_signs) return bad("--compress sign: use --comm-dtype int8 (error feedback too)");
  if (o.accumulate > 1) return bad("--accumulate: each batch is a local step; raise --batch");
  return {};
}

caf::error validate(const launch_options& o) {
  auto bad = [](std::string text) { return make_error(errc::bad_configuration, std::move(text)); };
  if (o.workers == 0 || o.servers == 0) return bad("--workers and --servers must be at least 1");
  if (o.max_workers != 0 && o.max_workers < o.workers)
    return bad("--max-workers must be at least --workers");
  if (std::max(o.workers, o.max_workers) > (1u << 16)) return bad("at most 65536 workers");
  if (o.epochs == 0 || o.batch == 0) return bad("--epochs and --batch must be at least 1");
  if (!(o.lr > 0)) return bad("--lr must be positive");
  if (o.dash_block < 1 || o.dash_block > 4096 || o.dash_freq < 1)
    return bad("--dash-block must be 1 to 4096 and --dash-freq at least 1");
  const bool on_gpu = o.dash_device == dash_device_kind::gpu;
  if (on_gpu && o.role == node_role::embedded && o.optimizer != optimizer_config::kind::dash)
    return bad("--dash-device gpu is for --optimizer dash");
  if (on_gpu && (o.dash_solver != root_solver::coupled_newton ||
                 o.dash_scaling != root_scaling::power_iteration))
    return bad(
        "--dash-device gpu steps coupled-Newton roots scaled by power iteration: use "
        "--dash-solver cn --dash-scaling power");
  if (o.accumulate == 0) return bad("--accumulate must be at least 1");
  for (const auto& [rank, ms] : o.worker_delay_ms)
    if (rank >= std::max(o.workers, o.max_workers))
      return bad(fmt::format("--worker-delay-ms names worker {} of {}", rank, o.workers));
  for (const auto& [rank, factor] : o.dp.worker_slowdown)
    if (rank >= std::max(o.workers, o.max_workers))
      return bad(fmt::format("--worker-slowdown names worker {} of {}", rank, o.workers));
  if (o.dp.adam != compressed_adam::none && !o.data_parallel())
    return bad(fmt::format("--optimizer {} compresses an allreduce: it needs --mode dp",
                           to_string(o.dp.adam)));
  if (o.hybrid() && o.accumulate > 1) return bad("--mode hybrid does not yet take --accumulate");
  if (auto e = validate_zero_stage(o)) return e;
  if (auto e = validate_diloco(o)) return e;
  if (o.hybrid() && o.consistency.type != consistency_config::mode::async)
    return bad(
        "--mode hybrid: the tables are asynchronous and the dense part is synchronous already: "
        "no --consistency");
  if (o.dp.var_update_scaler == 0 || o.dp.local_step_clipper == 0)
    return bad("--var-update-scaler and --local-step-clipper must be at least 1");
  if (o.momentum < 0 || o.momentum >= 1) return bad("--momentum must be in [0, 1)");
  if (o.weight_decay < 0) return bad("--weight-decay must not be negative");
  if (o.clip < 0 || o.sync_threshold < 0)
    return bad("--clip and --sync-threshold must not be negative");
  if (o.export_every < 1) return bad("--export-every must be at least 1 second");
  if (o.buckets > (1u << 16)) return bad("--buckets must be at most 65536");
  if (o.join_timeout.count() <= 0 || o.request_timeout.count() <= 0)
    return bad("--join-timeout and --request-timeout must be positive");
  if (o.heartbeat_interval.count() <= 0 || o.heartbeat_timeout <= o.heartbeat_interval)
    return bad("--heartbeat-ms must be positive and below --heartbeat-timeout-ms");
  if (o.restart_period.count() <= 0) return bad("--restart-period-ms must be positive");
  if (o.stall_timeout.count() < 0) return bad("--stall-timeout must not be negative (0: off)");
  const bool standby = o.standby_of.port != 0 || o.coordinators.size() > 1;
  if (standby &&
      (o.takeover_timeout <= o.heartbeat_timeout || 2 * o.takeover_timeout >= o.request_timeout))
    return bad(
        "--takeover-timeout-ms must be above --heartbeat-timeout-ms and below half of "
        "--request-timeout (members wait that long for a takeover to end)");
  if (o.standby_of.port != 0 && o.role != node_role::coordinator)
    return bad("--standby-of is for --role coordinator");
  if (o.replication < 1 || o.replication > 3)
    return bad("--replication must be 1, 2 or 3 (a primary and a chain of R - 1 backups)");
  const bool places_buckets = o.role == node_role::coordinator || o.role == node_role::embedded;
  if (places_buckets && o.replication > o.servers)  // members do not know --servers
    return bad(
        fmt::format("--replication {} needs at least {} servers", o.replication, o.replication));
  if (o.checkpoint_keep < 2) return bad("--checkpoint-keep must be at least 2");
  if (!(o.warn.update_variance >= 0) || !(o.warn.loss_oscillation >= 0) ||
      !(o.warn.update_ratio >= 0 && o.warn.update_ratio <= 1))
    return bad("--warn-* thresholds must not be negative (--warn-update-ratio: 0 to 1)");
  if (o.metrics_port < -1 || o.metrics_port > 65535)
    return bad("--metrics-port must be a port number (0: any free port)");
  if (o.dashboard_port < -1 || o.dashboard_port > 65535)
    return bad("--dashboard-port must be a port number (0: any free port)");
  if (auto e = validate_security(o)) return e;
  if (o.role != node_role::embedded && o.secret.empty())
    return bad("a distributed node needs --secret or TROUPE_SECRET");
  return {};
}

}  // namespace

std::string to_string(node_role r) {
  switch (r) {
    case node_role::embedded:
      return "embedded";
    case node_role::coordinator:
      return "coordinator";
    case node_role::server:
      return "server";
    case node_role::worker:
      return "worker";
  }
  return "unknown";
}

std::string to_string(const host_port& x) {
  return fmt::format("{}:{}", x.host, x.port);
}

std::string to_string(const std::vector<host_port>& xs) {
  std::string out;
  for (const auto& x : xs) {
    if (!out.empty()) out += ',';
    out += to_string(x);
  }
  return out;
}

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

caf::expected<host_port> parse_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return make_error(errc::bad_configuration, fmt::format("'{}' is not HOST:PORT", text));
  host_port out{text.substr(0, colon), 0};
  if (auto err = parse_number("port", text.substr(colon + 1), out.port)) return err;
  return out;
}

caf::expected<std::vector<host_port>> parse_host_list(const std::string& text) {
  std::vector<host_port> out;
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    auto hp = parse_host_port(text.substr(at, comma - at));
    if (!hp) return std::move(hp.error());
    out.push_back(std::move(*hp));
    at = comma + 1;
  }
  return out;
}

const std::string& launch_options::app_value(const std::string& flag) const {
  static const std::string empty;
  auto it = app.find(flag);
  return it == app.end() ? empty : it->second;
}

caf::expected<double> launch_options::app_real(const std::string& flag, bool whole,
                                               double max) const {
  const std::string& text = app_value(flag);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const bool in_range = std::isfinite(value) && value >= 0 && value <= max;
  if (text.empty() || *end != '\0' || !in_range || (whole && value != std::floor(value)))
    return make_error(
        errc::bad_configuration,
        fmt::format("--{} must be a {} {}, not '{}'", flag, whole ? "whole number" : "number",
                    max < 1e18 ? fmt::format("in [0, {}]", max) : ">= 0", text));
  return value;
}

env_lookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    if (const char* v = std::getenv(name.c_str())) return std::string{v};
    return std::nullopt;
  };
}

caf::expected<launch_options> parse_launch_options(
    const std::vector<std::string>& args, const env_lookup& env,
    const std::vector<app_flag>& app_flags, const std::map<std::string, std::string>& defaults) {
  std::map<std::string, bool> switches;
  for (const auto& f : flag_table()) switches[f.name] = f.value_name.empty();
  for (const auto& f : app_flags) switches[f.name] = f.value_name.empty();
  auto collected = collect(args, env, switches, defaults);
  if (!collected) return std::move(collected.error());
  auto& v = *collected;
  launch_options o;
  for (const auto& f : app_flags) o.app[f.name] = v.count(f.name) ? v[f.name] : f.default_value;
  for (const auto& f : app_flags)
    if (f.type != app_flag::text)
      if (auto checked =
              o.app_real(f.name, f.type == app_flag::whole, std::numeric_limits<double>::max());
          !checked)
        return std::move(checked.error());
  for (const auto& f : flag_table())
    if (auto it = v.find(f.name); it != v.end())
      if (auto err = f.apply(it->second, o)) return err;
  if (auto err = check_scopes(v, o)) return err;
  if (o.diloco_mode() && !v.count("optimizer")) o.optimizer = optimizer_config::kind::adamw;
  auto get = [&](const char* name) -> const std::string* {
    auto it = v.find(name);
    return it == v.end() ? nullptr : &it->second;
  };
  if (auto e = apply_torchrun(v, o)) return e;
  if (!get("listen")) {
    // torchrun's master address is where rank 0 listens; a server takes any free port.
    if (o.role == node_role::coordinator && get("torchrun-master")) {
      auto hp = parse_host_port(*get("torchrun-master"));
      if (!hp) return std::move(hp.error());
      o.listen = *hp;
    } else if (o.role == node_role::server && get("slurm-port")) {
      // Under srun on the task's own node, after the coordinator's port by its local id.
      uint32_t base = 0, local = 0;
      if (auto e = parse_number("slurm port", *get("slurm-port"), base)) return e;
      if (auto e = parse_number("SLURM_LOCALID", *get("slurm-local-id"), local)) return e;
      if (local >= 63) return make_error(errc::bad_configuration, "SLURM_LOCALID above 62");
      o.listen = host_port{*get("slurm-node"), static_cast<uint16_t>(base + 1 + local)};
    } else if (o.role == node_role::server) {
      o.listen = host_port{"127.0.0.1", 0};
    }
  }
  if (!o.tls_dir.empty() && !get("collective")) o.dp.collective = collective_kind::actors;
  if (o.help) return o;
  if (auto e = validate(o)) return e;
  return o;
}

optimizer_config optimizer_from(const launch_options& o) {
  return o.diloco_mode() ? outer_optimizer_from(o) : inner_optimizer_from(o);
}

optimizer_config outer_optimizer_from(const launch_options& o) {
  using kind = optimizer_config::kind;
  const bool bsp = o.consistency.type == consistency_config::mode::bsp;
  optimizer_config x;
  x.type = o.diloco.outer.value_or(bsp ? kind::nesterov : kind::delayed_nesterov);
  x.lr = o.diloco.outer_lr.value_or(bsp ? 0.7f : 0.5f);
  x.beta1 = o.diloco.outer_momentum;  // (sgd takes none)
  x.weight_decay = 0.0f;
  x.lr_staleness = o.lr_staleness;
  // bsp applies one averaged pseudo-gradient a round: no arrivals to wait for.
  x.delay = x.type == kind::delayed_nesterov && !bsp ? std::max(o.workers, 1u) : 1;
  return x;
}

optimizer_config inner_optimizer_from(const launch_options& o) {
  optimizer_config x;
  x.type = o.optimizer;
  if (x.type == optimizer_config::kind::app) x.rule = o.optimizer_rule;
  x.lr = o.lr;
  x.weight_decay = o.weight_decay;
  x.lr_staleness = o.lr_staleness;
  if (x.type == optimizer_config::kind::momentum) x.beta1 = o.momentum;
  x.dash_block = o.dash_block;
  x.dash_freq = o.dash_freq;
  x.dash_solver = o.dash_solver;
  x.dash_storage = o.dash_storage;
  x.dash_nesterov = o.dash_nesterov;
  x.dash_scaling = o.dash_scaling;
  return x;
}

std::vector<std::pair<std::string, std::string>> flag_settings(const launch_options& o) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : flag_table())
    if (f.name != "help") out.emplace_back(f.name, f.show(o));
  for (const auto& [name, value] : o.app) out.emplace_back(name, value);
  return out;
}

std::vector<std::pair<std::string, bool>> common_flags() {
  std::vector<std::pair<std::string, bool>> out;
  for (const auto& f : flag_table())
    if (f.name != "help") out.emplace_back(f.name, f.value_name.empty());
  return out;
}

caf::error check_flag_value(const std::string& flag, const std::string& text) {
  for (const auto& f : flag_table()) {
    if (f.name != flag) continue;
    launch_options scratch;
    return f.apply(text, scratch);
  }
  return make_error(errc::bad_configuration, fmt::format("unknown flag --{}", flag));
}

const char* to_string(job_mode m) {
  switch (m) {
    case job_mode::ps:
      return "ps";
    case job_mode::dp:
      return "dp";
    case job_mode::hybrid:
      return "hybrid";
    case job_mode::diloco:
      return "diloco";
  }
  return "?";
}

const char* to_string(reduction_kind k) {
  switch (k) {
    case reduction_kind::flat:
      return "flat";
    case reduction_kind::two_level:
      return "two-level";
    case reduction_kind::automatic:
      return "auto";
  }
  return "?";
}

const char* to_string(dash_device_kind k) {
  return k == dash_device_kind::gpu ? "gpu" : "cpu";
}

caf::expected<consistency_config> parse_consistency(const std::string& text) {
  using mode = consistency_config::mode;
  if (text == "async") return consistency_config{mode::async, 0};
  if (text == "bsp") return consistency_config{mode::bsp, 0};
  if (text.rfind("ssp:", 0) == 0) {
    consistency_config c{mode::ssp, 0};
    if (auto err = parse_number("consistency", text.substr(4), c.bound)) return err;
    return c;
  }
  return make_error(errc::bad_configuration,
                    fmt::format("--consistency must be async, ssp:S or bsp, not '{}'", text));
}

caf::expected<compensation_config> parse_compensation(const std::string& text) {
  using kind = compensation_config::kind;
  if (text == "none") return compensation_config{kind::none, 0.0f};
  const auto colon = text.find(':');
  const std::string name = text.substr(0, colon);
  compensation_config c;
  if (name == "linear")
    c.type = kind::linear;
  else if (name == "dcasgd")
    c.type = kind::dcasgd;
  else if (name == "dcasgd-adaptive")
    c.type = kind::dcasgd_adaptive;
  else
    return make_error(errc::bad_configuration,
                      fmt::format("--dc must be none, linear:L, dcasgd:L or dcasgd-adaptive:L0, "
                                  "not '{}'",
                                  text));
  if (colon == std::string::npos)
    return make_error(errc::bad_configuration, fmt::format("--dc {} needs :lambda", name));
  if (auto err = parse_number("dc", text.substr(colon + 1), c.lambda)) return err;
  if (c.lambda < 0) return make_error(errc::bad_configuration, "--dc lambda must not be negative");
  return c;
}

namespace {

// "i:X[,j:Y...]" for flag `flag`: a value per worker rank, each read by parse_number.
template <class T>
caf::expected<std::map<uint32_t, T>> parse_rank_map(const std::string& flag,
                                                    const std::string& text) {
  std::map<uint32_t, T> out;
  for (const auto& item : split_list(text)) {
    const auto colon = item.find(':');
    if (colon == std::string::npos)
      return make_error(errc::bad_configuration,
                        fmt::format("--{}: '{}' is not RANK:VALUE", flag, item));
    uint32_t rank = 0;
    T value{};
    if (auto err = parse_number(flag, item.substr(0, colon), rank)) return err;
    if (auto err = parse_number(flag, item.substr(colon + 1), value)) return err;
    out[rank] = value;
  }
  return out;
}

}  // namespace

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find(',', begin), text.size());
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

caf::expected<std::vector<uint32_t>> parse_widths(const std::string& flag, const std::string& text,
                                                  uint32_t most) {
  std::vector<uint32_t> widths;
  for (const auto& item : split_list(text)) {
    char* stop = nullptr;
    const unsigned long width = std::strtoul(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || width == 0 || width > most)
      return make_error(
          errc::bad_configuration,
          fmt::format("--{} takes widths 1 to {} as W,W,..., not '{}'", flag, most, text));
    widths.push_back(static_cast<uint32_t>(width));
  }
  return widths;
}

caf::expected<std::map<uint32_t, uint32_t>> parse_worker_delays(const std::string& text) {
  return parse_rank_map<uint32_t>("worker-delay-ms", text);
}

caf::expected<std::map<uint32_t, double>> parse_worker_slowdowns(const std::string& text) {
  auto out = parse_rank_map<double>("worker-slowdown", text);
  if (!out) return out;
  for (const auto& [rank, factor] : *out)
    if (!(factor >= 1) || factor > 1000)
      return make_error(errc::bad_configuration,
                        fmt::format("--worker-slowdown: worker {}'s factor must be 1 to 1000, "
                                    "not {}",
                                    rank, factor));
  return out;
}

std::string launch_usage(const std::string& program, const std::string& summary,
                         const std::vector<app_flag>& app_flags,
                         const std::map<std::string, std::string>& defaults) {
  std::string out = fmt::format("{}: {}\n\nusage: {} [flags]\n\n", program, summary, program);
  auto add = [&](const std::string& name, const std::string& value_name, const std::string& help,
                 const std::string& default_value) {
    const std::string left = value_name.empty() ? "--" + name : "--" + name + " " + value_name;
    out += fmt::format("  {:<26} {}", left, help);
    const auto own = defaults.find(name);
    const std::string& shown = own != defaults.end() ? own->second : default_value;
    if (!shown.empty()) out += fmt::format(" (default {})", shown);
    out += '\n';
  };
  const launch_options defaults_of_the_struct;
  for (const auto& f : flag_table()) {
    const char* job = f.scope == flag_scope::dp             ? "--mode dp, hybrid: "
                      : f.scope == flag_scope::diloco       ? "--mode diloco: "
                      : f.scope == flag_scope::dp_or_diloco ? "--mode dp, hybrid, diloco: "
                                                            : "";
    const std::string shown = f.show(defaults_of_the_struct);
    add(f.name, f.value_name, job + f.help, f.value_name.empty() ? "" : shown);  // switches: off
  }
  for (const auto& f : app_flags) add(f.name, f.value_name, f.help, f.default_value);
  out +=
      "\nEvery flag --foo-bar may also be given as TROUPE_FOO_BAR. torchrun's MASTER_ADDR,\n"
      "MASTER_PORT, RANK (0 coordinator, 1..M servers, then workers) and WORLD_SIZE are read,\n"
      "and so are srun's SLURM_PROCID (as RANK), SLURM_NTASKS (as WORLD_SIZE),\n"
      "SLURM_STEP_NODELIST (its first host coordinates, on --port), SLURM_LOCALID and\n"
      "SLURM_JOB_ID.\n";
  return out;
}

}  // namespace troupe
