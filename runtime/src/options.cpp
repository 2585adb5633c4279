#include "troupe/options.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "option_flags.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

std::string env_name(const std::string& flag) {
  std::string out = "TROUPE_";
  for (char c : flag) out += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return out;
}

template <class T>
caf::error parse_number(const std::string& flag, const std::string& text, T& out) {
  if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(value))
      return make_error(errc::bad_configuration,
                        fmt::format("--{}: not a number: '{}'", flag, text));
    out = static_cast<T>(value);
    return {};
  } else {
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size())
      return make_error(errc::bad_configuration,
                        fmt::format("--{}: not a non-negative integer: '{}'", flag, text));
    return {};
  }
}

// Collects raw values: defaults, then torchrun, then TROUPE_*, then flags (later wins).
caf::expected<std::map<std::string, std::string>> collect(
    const std::vector<std::string>& args, const env_lookup& env, const std::vector<app_flag>& flags,
    const std::map<std::string, std::string>& defaults) {
  std::map<std::string, std::string> values = defaults;
  std::map<std::string, const app_flag*> by_name;
  for (const auto& f : flags) by_name[f.name] = &f;
  if (auto addr = env("MASTER_ADDR")) {
    const std::string port = env("MASTER_PORT").value_or("7600");
    values["torchrun-master"] = *addr + ":" + port;
    values["coordinator"] = *addr + ":" + port;
  }
  if (auto rank = env("RANK")) values["torchrun-rank"] = *rank;
  if (auto world = env("WORLD_SIZE")) values["torchrun-world"] = *world;
  for (const auto& f : flags)
    if (auto v = env(env_name(f.name))) values[f.name] = *v;
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
    auto it = by_name.find(name);
    if (it == by_name.end())
      return make_error(errc::bad_configuration,
                        fmt::format("unknown flag --{} (see --help)", name));
    if (it->second->value_name.empty()) {
      values[name] = inline_value.value_or("true");  // a switch: --x, --x=true, --x=false
    } else if (inline_value) {
      values[name] = *inline_value;
    } else if (i + 1 < args.size()) {
      values[name] = args[++i];
    } else {
      return make_error(errc::bad_configuration, fmt::format("--{} needs a value", name));
    }
  }
  return values;
}

caf::error parse_switch(const char* flag, const std::string* text, bool& out);

// Flags that only mean something to the parameter service.
constexpr const char* parameter_service_flags[] = {
    "servers",  "consistency", "dc",         "replication",  "sync-threshold", "prefetch",
    "compress", "buckets",     "accumulate", "lr-staleness", "dash-device",    "worker-delay-ms"};

// --mode ps|dp and, for dp, its own flags; the parameter service's flags are refused in dp.
caf::error parse_mode(const std::string& text, const std::map<std::string, std::string>& v,
                      launch_options& o) {
  auto bad = [](std::string text) { return make_error(errc::bad_configuration, std::move(text)); };
  if (text != "ps" && text != "dp")
    return bad(fmt::format("--mode must be ps or dp, not '{}'", text));
  const char* dp_only[] = {"collective",     "bucket-mb",  "no-overlap",
                           "checksum-every", "host-label", "reduction"};
  o.data_parallel = text == "dp";
  if (!o.data_parallel) {
    for (const char* flag : dp_only)
      if (v.count(flag)) return bad(fmt::format("--{} is for --mode dp", flag));
    return {};
  }
  for (const char* flag : parameter_service_flags)
    if (v.count(flag))
      return bad(fmt::format(
          "--{} belongs to the parameter service (--mode ps); a data-parallel job has no servers",
          flag));
  if (auto it = v.find("collective"); it != v.end()) {
    if (it->second != "gloo" && it->second != "actors" && it->second != "nccl")
      return bad(fmt::format("--collective must be gloo, actors or nccl, not '{}'", it->second));
    o.dp.collective = it->second;
  }
  if (auto it = v.find("bucket-mb"); it != v.end()) {
    char* end = nullptr;
    o.dp.bucket_mb = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != '\0' || !(o.dp.bucket_mb > 0) || o.dp.bucket_mb > 1024)
      return bad(fmt::format("--bucket-mb must be a number of MiB above 0, at most 1024, not '{}'",
                             it->second));
  }
  bool no_overlap = false;
  if (auto e = parse_switch("no-overlap", v.count("no-overlap") ? &v.at("no-overlap") : nullptr,
                            no_overlap))
    return e;
  o.dp.overlap = !no_overlap;
  if (auto it = v.find("checksum-every"); it != v.end())
    if (auto e = parse_number("checksum-every", it->second, o.dp.checksum_every)) return e;
  if (auto it = v.find("host-label"); it != v.end()) {
    if (it->second.empty() || it->second.size() > 64)
      return bad("--host-label must be 1 to 64 characters");
    o.dp.host_label = it->second;
  }
  if (auto it = v.find("reduction"); it != v.end()) {
    if (it->second != "flat" && it->second != "two-level" && it->second != "auto")
      return bad(fmt::format("--reduction must be flat, two-level or auto, not '{}'", it->second));
    o.dp.reduction = it->second;
  }
  return {};
}

// Maps torchrun's RANK / WORLD_SIZE onto a role: rank 0 coordinates, ranks 1..servers serve,
// the rest are workers; WORLD_SIZE sets --workers when it is not given.
caf::error apply_torchrun(std::map<std::string, std::string>& values, launch_options& out) {
  if (!values.count("torchrun-rank") || values.count("role")) return {};
  uint32_t rank = 0;
  if (auto err = parse_number("RANK", values["torchrun-rank"], rank)) return err;
  if (out.data_parallel) {  // rank 0 coordinates and trains; WORLD_SIZE counts trainers
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

// A switch is on when given bare or as true/1/yes, off as false/0/no.
caf::error parse_switch(const char* flag, const std::string* text, bool& out) {
  if (!text) return {};
  if (*text == "true" || *text == "1" || *text == "yes")
    out = true;
  else if (*text == "false" || *text == "0" || *text == "no")
    out = false;
  else
    return make_error(errc::bad_configuration,
                      fmt::format("--{} takes no value, or true/false, not '{}'", flag, *text));
  return {};
}

caf::error parse_role(const std::string& text, node_role& out) {
  if (text.empty())
    out = node_role::embedded;
  else if (text == "coordinator")
    out = node_role::coordinator;
  else if (text == "server")
    out = node_role::server;
  else if (text == "worker")
    out = node_role::worker;
  else
    return make_error(errc::bad_configuration,
                      fmt::format("--role must be coordinator, server or worker, not '{}'", text));
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
  if (o.optimizer != "adam" && o.optimizer != "adamw" && o.optimizer != "sgd" &&
      o.optimizer != "momentum" && o.optimizer != "dash")
    return bad("--optimizer must be adam, adamw, sgd, momentum or dash");
  if (o.dash_block < 1 || o.dash_block > 4096 || o.dash_freq < 1)
    return bad("--dash-block must be 1 to 4096 and --dash-freq at least 1");
  if (o.dash_solver != "evd" && o.dash_solver != "cn" && o.dash_solver != "ndb" &&
      o.dash_solver != "cheb")
    return bad("--dash-solver must be evd, cn, ndb or cheb");
  if (o.dash_storage != "fp32" && o.dash_storage != "bf16" && o.dash_storage != "fp16")
    return bad("--dash-storage must be fp32, bf16 or fp16");
  if (o.dash_scaling != "power" && o.dash_scaling != "frobenius")
    return bad("--dash-scaling must be power or frobenius");
  if (o.dash_device != "cpu" && o.dash_device != "gpu")
    return bad("--dash-device must be cpu or gpu");
  if (o.dash_device == "gpu" && o.role == node_role::embedded && o.optimizer != "dash")
    return bad("--dash-device gpu is for --optimizer dash");
  if (o.dash_device == "gpu" && (o.dash_solver != "cn" || o.dash_scaling != "power"))
    return bad(
        "--dash-device gpu steps coupled-Newton roots scaled by power iteration: use "
        "--dash-solver cn --dash-scaling power");
  if (o.accumulate == 0) return bad("--accumulate must be at least 1");
  for (const auto& [rank, ms] : o.worker_delay_ms)
    if (rank >= o.workers)
      return bad(fmt::format("--worker-delay-ms names worker {} of {}", rank, o.workers));
  if (o.momentum < 0 || o.momentum >= 1) return bad("--momentum must be in [0, 1)");
  if (o.weight_decay < 0) return bad("--weight-decay must not be negative");
  if (o.clip < 0 || o.sync_threshold < 0)
    return bad("--clip and --sync-threshold must not be negative");
  if (o.buckets > (1u << 16)) return bad("--buckets must be at most 65536");
  if (o.join_timeout.count() <= 0 || o.request_timeout.count() <= 0)
    return bad("--join-timeout and --request-timeout must be positive");
  if (o.heartbeat_interval.count() <= 0 || o.heartbeat_timeout <= o.heartbeat_interval)
    return bad("--heartbeat-ms must be positive and below --heartbeat-timeout-ms");
  if (o.restart_period.count() <= 0) return bad("--restart-period-ms must be positive");
  if (o.replication < 1 || o.replication > 2)
    return bad("--replication must be 1 or 2 (primary-backup)");
  if (o.replication > o.servers)
    return bad(
        fmt::format("--replication {} needs at least {} servers", o.replication, o.replication));
  if (o.checkpoint_keep < 2) return bad("--checkpoint-keep must be at least 2");
  if (!(o.warn.update_variance >= 0) || !(o.warn.loss_oscillation >= 0) ||
      !(o.warn.update_ratio >= 0 && o.warn.update_ratio <= 1))
    return bad("--warn-* thresholds must not be negative (--warn-update-ratio: 0 to 1)");
  if (o.metrics_port < -1 || o.metrics_port > 65535)
    return bad("--metrics-port must be a port number (0: any free port)");
  if (o.metrics_port >= 0 && !o.insecure && !is_loopback(o.listen.host))
    return bad(
        "--metrics-port serves on --listen's host, which is not a loopback address; add "
        "--insecure to do it (docs/SECURITY.md)");
  const bool listens = o.role == node_role::coordinator || o.role == node_role::server;
  if (listens && !o.insecure && !is_loopback(o.listen.host))
    return bad(
        fmt::format("--listen {} is not a loopback address: Troupe's handshake keeps out "
                    "mistakes, not attackers (docs/SECURITY.md); add --insecure to do it",
                    to_string(o.listen)));
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
    return make_error(errc::bad_configuration,
                      fmt::format("--{} must be a {} in [0, {}], not '{}'", flag,
                                  whole ? "whole number" : "number", max, text));
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
  std::vector<app_flag> flags = common_flags();
  flags.insert(flags.end(), app_flags.begin(), app_flags.end());
  auto collected = collect(args, env, flags, defaults);
  if (!collected) return std::move(collected.error());
  auto& v = *collected;
  launch_options o;
  for (const auto& f : app_flags) o.app[f.name] = v.count(f.name) ? v[f.name] : f.default_value;
  auto get = [&](const char* name) -> const std::string* {
    auto it = v.find(name);
    return it == v.end() ? nullptr : &it->second;
  };
  caf::error err;
  auto number = [&](const char* name, auto& field) {
    if (auto s = get(name); s && !err) err = parse_number(name, *s, field);
  };
  auto address = [&](const char* name, host_port& field) {
    if (auto s = get(name); s && !err) {
      if (auto hp = parse_host_port(*s))
        field = *hp;
      else
        err = std::move(hp.error());
    }
  };
  if (auto s = get("role")) err = parse_role(*s, o.role);
  if (!err) err = parse_mode(get("mode") ? *get("mode") : std::string("ps"), v, o);
  address("listen", o.listen);
  address("coordinator", o.coordinator);
  number("workers", o.workers);
  number("servers", o.servers);
  number("max-workers", o.max_workers);
  number("buckets", o.buckets);
  number("epochs", o.epochs);
  number("batch", o.batch);
  number("lr", o.lr);
  number("momentum", o.momentum);
  number("weight-decay", o.weight_decay);
  number("clip", o.clip);
  number("sync-threshold", o.sync_threshold);
  number("seed", o.seed);
  number("threads", o.threads);
  number("blas-threads", o.blas_threads);
  number("accumulate", o.accumulate);
  number("max-restarts", o.max_restarts);
  number("replication", o.replication);
  number("checkpoint-every", o.checkpoint_every);
  number("checkpoint-keep", o.checkpoint_keep);
  number("metrics-port", o.metrics_port);
  number("warn-update-variance", o.warn.update_variance);
  number("warn-loss-oscillation", o.warn.loss_oscillation);
  number("warn-update-ratio", o.warn.update_ratio);
  int64_t join_s = o.join_timeout.count(), request_s = o.request_timeout.count();
  int64_t beat_ms = o.heartbeat_interval.count(), beat_timeout_ms = o.heartbeat_timeout.count();
  number("join-timeout", join_s);
  number("request-timeout", request_s);
  number("heartbeat-ms", beat_ms);
  number("heartbeat-timeout-ms", beat_timeout_ms);
  int64_t restart_period_ms = o.restart_period.count();
  number("restart-period-ms", restart_period_ms);
  if (err) return err;
  o.restart_period = std::chrono::milliseconds{restart_period_ms};
  o.join_timeout = std::chrono::seconds{join_s};
  o.request_timeout = std::chrono::seconds{request_s};
  o.heartbeat_interval = std::chrono::milliseconds{beat_ms};
  o.heartbeat_timeout = std::chrono::milliseconds{beat_timeout_ms};
  if (auto s = get("secret")) o.secret = *s;
  if (auto s = get("name")) o.name = *s;
  if (auto s = get("optimizer")) o.optimizer = *s;
  if (auto s = get("dash-solver")) o.dash_solver = *s;
  number("dash-block", o.dash_block);
  number("dash-freq", o.dash_freq);
  if (auto s = get("report")) o.report = *s;
  if (auto s = get("checkpoint-dir")) o.checkpoint_dir = *s;
  if (auto s = get("resume")) o.resume = *s;
  if (auto e = parse_switch("insecure", get("insecure"), o.insecure)) return e;
  if (auto e = parse_switch("help", get("help"), o.help)) return e;
  if (auto e = parse_switch("lr-staleness", get("lr-staleness"), o.lr_staleness)) return e;
  if (auto e = parse_switch("dash-nesterov", get("dash-nesterov"), o.dash_nesterov)) return e;
  if (auto s = get("dash-storage")) o.dash_storage = *s;
  if (auto s = get("dash-scaling")) o.dash_scaling = *s;
  if (auto s = get("dash-device")) o.dash_device = *s;
  if (auto e = parse_switch("prefetch", get("prefetch"), o.prefetch)) return e;
  if (auto s = get("compress")) {
    if (*s != "none" && *s != "sign")
      return make_error(errc::bad_configuration,
                        fmt::format("--compress must be none or sign, not '{}'", *s));
    o.compress_signs = *s == "sign";
  }
  if (auto s = get("consistency")) {
    auto c = parse_consistency(*s);
    if (!c) return std::move(c.error());
    o.consistency = *c;
  }
  if (auto s = get("dc")) {
    auto c = parse_compensation(*s);
    if (!c) return std::move(c.error());
    o.compensation = *c;
  }
  if (auto s = get("worker-delay-ms")) {
    auto d = parse_worker_delays(*s);
    if (!d) return std::move(d.error());
    o.worker_delay_ms = std::move(*d);
  }
  if (auto s = get("log-level"); s && !parse_log_level(*s, o.level))
    return make_error(errc::bad_configuration, fmt::format("--log-level: unknown level '{}'", *s));
  if (auto e = apply_torchrun(v, o)) return e;
  if (!get("listen")) {
    // torchrun's master address is where rank 0 listens; a server takes any free port.
    if (o.role == node_role::coordinator && get("torchrun-master")) {
      auto hp = parse_host_port(*get("torchrun-master"));
      if (!hp) return std::move(hp.error());
      o.listen = *hp;
    } else if (o.role == node_role::server) {
      o.listen = host_port{"127.0.0.1", 0};
    }
  }
  if (o.help) return o;
  if (auto e = validate(o)) return e;
  return o;
}

optimizer_config optimizer_from(const launch_options& o) {
  using kind = optimizer_config::kind;
  optimizer_config x;
  x.type = o.optimizer == "sgd"        ? kind::sgd
           : o.optimizer == "momentum" ? kind::momentum
           : o.optimizer == "adamw"    ? kind::adamw
           : o.optimizer == "dash"     ? kind::dash
                                       : kind::adam;
  x.lr = o.lr;
  x.weight_decay = o.weight_decay;
  x.lr_staleness = o.lr_staleness;
  if (x.type == kind::momentum) x.beta1 = o.momentum;
  x.dash_block = o.dash_block;
  x.dash_freq = o.dash_freq;
  x.dash_solver = o.dash_solver == "evd"    ? 0
                  : o.dash_solver == "ndb"  ? 2
                  : o.dash_solver == "cheb" ? 3
                                            : 1;
  x.dash_storage = o.dash_storage == "bf16" ? 1 : o.dash_storage == "fp16" ? 2 : 0;
  x.dash_nesterov = o.dash_nesterov;
  x.dash_scaling = o.dash_scaling == "frobenius" ? 1 : 0;
  return x;
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

caf::expected<std::map<uint32_t, uint32_t>> parse_worker_delays(const std::string& text) {
  std::map<uint32_t, uint32_t> out;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const auto colon = item.find(':');
    if (colon == std::string::npos)
      return make_error(errc::bad_configuration,
                        fmt::format("--worker-delay-ms: '{}' is not RANK:MS", item));
    uint32_t rank = 0, ms = 0;
    if (auto err = parse_number("worker-delay-ms", item.substr(0, colon), rank)) return err;
    if (auto err = parse_number("worker-delay-ms", item.substr(colon + 1), ms)) return err;
    out[rank] = ms;
    begin = end + 1;
  }
  return out;
}

std::string launch_usage(const std::string& program, const std::string& summary,
                         const std::vector<app_flag>& app_flags,
                         const std::map<std::string, std::string>& defaults) {
  std::string out = fmt::format("{}: {}\n\nusage: {} [flags]\n\n", program, summary, program);
  auto add = [&](const app_flag& f) {
    const std::string left =
        f.value_name.empty() ? "--" + f.name : "--" + f.name + " " + f.value_name;
    out += fmt::format("  {:<26} {}", left, f.help);
    const auto own = defaults.find(f.name);
    const std::string& shown = own != defaults.end() ? own->second : f.default_value;
    if (!shown.empty()) out += fmt::format(" (default {})", shown);
    out += '\n';
  };
  for (const auto& f : common_flags()) add(f);
  for (const auto& f : app_flags) add(f);
  out +=
      "\nEvery flag --foo-bar may also be given as TROUPE_FOO_BAR. torchrun's MASTER_ADDR,\n"
      "MASTER_PORT, RANK (0 coordinator, 1..M servers, then workers) and WORLD_SIZE are read.\n";
  return out;
}

}  // namespace troupe
