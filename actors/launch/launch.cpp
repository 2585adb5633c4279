// run_app: turns a parsed command line into a running node. The embedded default spawns the
// coordinator, servers and workers in one actor system; each distributed role spawns its one
// actor after the handshake. main() waits for that actor to end and maps its exit reason to
// the process exit code.
#include <fmt/format.h>
#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <thread>

#include "actors/bucket/dash_device.hpp"
#include "actors/bucket/sparse_table.hpp"
#include "actors/coordinator/coordinator.hpp"
#include "actors/dp/collective/nccl_collective.hpp"
#include "actors/dp/trainer/dp_trainer.hpp"
#include "actors/launch/dashboard_state.hpp"
#include "actors/launch/launch_parts.hpp"
#include "actors/launch/stop_signals.hpp"
#include "actors/server/server.hpp"
#include "actors/supervision/admission/gatekeeper.hpp"
#include "actors/supervision/failure/coordinator_watch.hpp"
#include "actors/supervision/failure/heartbeat.hpp"
#include "actors/supervision/failure/stall_watch.hpp"
#include "actors/supervision/node_metrics.hpp"
#include "actors/supervision/supervisors/supervisor.hpp"
#include "actors/worker/worker.hpp"
#include "troupe/app.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/error.hpp"
#include "troupe/metrics_http.hpp"
#include "troupe/net.hpp"
#include "troupe/node.hpp"

namespace troupe {

namespace launch_detail {

// Blocks until `actor` ends; 0 if it ended normally, 1 (with the reason on stderr) otherwise.
// A stop signal (Ctrl-C, SIGTERM) stops it with errc::interrupted: a coordinator ends the job
// (its report says so, its members are told), a member's supervisor ends it. Then 128 + the
// signal; an actor that does not end within stop_bound ends the process. A member process's
// coordinator watch says (stop_atom, why) when the job is over for it: a member that has not
// ended within exit_bound::bound of that is stuck (in the user's code, say), and the process
// ends with 1, naming what `activity` says its members were doing.
int wait_for(caf::scoped_actor& self, const caf::actor_addr& actor, const std::string& program,
             const activity_board* activity) {
  constexpr auto slice = std::chrono::milliseconds(100);
  constexpr auto stop_bound = std::chrono::seconds(30);
  stop_signals signals;
  self->monitor(actor);
  caf::error reason;
  bool down = false;
  int stopped_by = 0;
  std::chrono::steady_clock::time_point give_up;
  std::optional<std::chrono::steady_clock::time_point> job_over;
  std::string over_why;
  while (!down) {
    self->receive(
        [&](caf::down_msg& msg) {
          if (msg.source != actor) return;
          reason = std::move(msg.reason);
          down = true;
        },
        [&](stop_atom, std::string& why) {
          if (job_over) return;
          job_over = std::chrono::steady_clock::now() + exit_bound::bound;
          over_why = std::move(why);
        },
        caf::after(slice) >>
            [&] {
              if (job_over && std::chrono::steady_clock::now() >= *job_over) {
                fmt::print(stderr, "{}: {}, and a member did not end within {} s{}; ending now\n",
                           program, over_why, exit_bound::bound.count(),
                           activity ? describe_activity(activity->snapshot()) : std::string{});
                std::_Exit(1);
              }
              if (stopped_by) {
                if (std::chrono::steady_clock::now() < give_up) return;
                fmt::print(stderr, "{}: not stopped within {} s of {}; ending now\n", program,
                           stop_bound.count(), stop_signal_name(stopped_by));
                std::_Exit(128 + stopped_by);
              }
              stopped_by = stop_signals::received();
              if (!stopped_by) return;
              fmt::print(stderr, "{}: {}: stopping (again to end at once)\n", program,
                         stop_signal_name(stopped_by));
              give_up = std::chrono::steady_clock::now() + stop_bound;
              self->send_exit(actor, make_error(errc::interrupted, stop_signal_name(stopped_by)));
            });
  }
  if (stopped_by) return 128 + stopped_by;
  if (!reason || reason == caf::exit_reason::normal) return 0;
  fmt::print(stderr, "{}: {}\n", program, describe(reason));
  return 1;
}

exit_bound::exit_bound(const launch_options& opts, const app_description& app)
    : program_(app.name),
      in_library_(app.in_library),
      config_(std::make_unique<caf::actor_system_config>()) {
  configure_actor_system(*config_, opts);
  system_ = std::make_unique<caf::actor_system>(*config_);
}

exit_bound::~exit_bound() {
  if (!in_library_) {
    std::thread([program = program_, code = code_] {
      std::this_thread::sleep_for(bound);
      fmt::print(stderr, "{}: the actor system did not shut down within {} s; ending now\n",
                 program, bound.count());
      std::_Exit(code);
    }).detach();
    return;  // the members destroy the system here, in order
  }
  const bool ended = end_actor_system_within(
      [system = system_.release(), config = config_.release()] {
        delete system;
        delete config;
      },
      bound);
  if (!ended)
    fmt::print(stderr,
               "{}: the actor system did not shut down within {} s; left behind, running (an "
               "actor that never ended: CAF issue 1196, or a member stuck in user code)\n",
               program_, bound.count());
}

// One BLAS thread per core for each of the workers that share this machine's cores.
void size_blas_for(unsigned workers_sharing) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  set_blas_threads(static_cast<int>(std::max(1u, cores / std::max(1u, workers_sharing))));
}

void size_blas(const launch_options& opts, unsigned local_workers) {
  if (opts.blas_threads)
    set_blas_threads(static_cast<int>(opts.blas_threads));
  else
    size_blas_for(local_workers);
}

void size_blas_for_coordinator(const launch_options& opts) {
  set_blas_threads(static_cast<int>(opts.blas_threads ? opts.blas_threads : 1));
}

// --dash-device gpu: the process's DASH device, shared by its buckets; none for cpu. A GPU
// that cannot be used refuses the start (a node asked for a GPU should not quietly use CPUs).
caf::expected<std::optional<dash_device_actor>> start_dash_device(caf::actor_system& sys,
                                                                  const launch_options& opts,
                                                                  const logger& log) {
  if (opts.dash_device != dash_device_kind::gpu) return std::optional<dash_device_actor>{};
  dash_device_config config;
  // Each request to the stream; a bucket waits a quarter of the request timeout in all.
  config.request_timeout = std::max(std::chrono::seconds(1), opts.request_timeout / 4);
  config.log = log.named("dash-device");
  auto device = spawn_dash_device(sys, config);
  if (!device) return std::move(device.error());
  log.info("buckets step DASH on GPU {}", config.device);
  return std::optional<dash_device_actor>{std::move(*device)};
}

caf::error start_metrics(const launch_options& opts, const logger& log, node_metrics& out) {
  declare_node_metrics(*out.registry);
  set(out.registry->gauge("troupe_up"), 1);
  if (opts.metrics_port < 0) return {};
  const host_port where{opts.listen.host, static_cast<uint16_t>(opts.metrics_port)};
  auto served = metrics_endpoint::start(out.registry, where, opts.tls_dir);
  if (!served) return std::move(served.error());
  out.endpoint = std::move(*served);
  log.info("metrics at {}://{}:{}/metrics", opts.tls_dir.empty() ? "http" : "https", where.host,
           out.endpoint->port());
  return {};
}

// The host a dp worker counts as for two-level reduction: --host-label, or the host name.
std::string host_label_of(const launch_options& opts) {
  if (!opts.dp.host_label.empty()) return opts.dp.host_label;
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && name[0] ? std::string(name) : "localhost";
}

// --collective nccl: a GPU for every trainer of this process, or why not (said at the start,
// not at the first step).
caf::error check_nccl(const launch_options& opts) {
  const bool trains_here = opts.role != node_role::coordinator || opts.dp.coordinator_trains;
  if (opts.dp.collective != collective_kind::nccl || !trains_here) return {};
  auto gpus = nccl_devices();
  if (!gpus) return std::move(gpus.error());
  const uint32_t trainers = opts.role == node_role::embedded ? opts.workers : 1;
  if (static_cast<uint32_t>(*gpus) < trainers)
    return make_error(errc::bad_configuration,
                      fmt::format("{} workers in this process and {} GPUs: NCCL needs one GPU "
                                  "per worker",
                                  trainers, *gpus));
  return {};
}

// Whether this node's pushes and pulls may take a data lane: not under TLS (a lane is not
// encrypted; the tensors stay on CAF's TLS connections) nor with --no-data-lane.
bool lanes_allowed(const caf::actor_system& sys, const launch_options& opts) {
  return !opts.no_data_lane && !net::uses_tls(sys) && !opts.secret.empty();
}

// A dp trainer of this process, named `name`, that ends with `parent`'s exit.
caf::actor spawn_trainer(caf::actor_system& sys, const launch_options& opts,
                         std::shared_ptr<const training_task> task, coordinator_link_ptr coord,
                         const std::string& name, caf::actor_addr parent, const logger& log,
                         const update_rules& rules) {
  const dp_trainer_config config{std::move(coord),
                                 std::move(task),
                                 name,
                                 opts.listen.host,
                                 host_label_of(opts),
                                 opts.request_timeout,
                                 std::move(parent),
                                 log,
                                 rules,
                                 lanes_allowed(sys, opts) ? opts.secret : std::string{}};
  return caf::actor_cast<caf::actor>(sys.spawn<caf::detached>(dp_trainer, config));
}

// The job's gatekeeper, handing out `coord`, published on --listen. When the port cannot be
// opened it says why on stderr, stops the coordinator and the gatekeeper, and returns none.
std::optional<gatekeeper_actor> publish_gatekeeper(caf::scoped_actor& self,
                                                   const launch_options& opts,
                                                   const coordinator_actor& coord,
                                                   const app_description& app, const logger& log) {
  auto& sys = self->system();
  gatekeeper_config config{opts.secret, coord, self->address(), log.named("gatekeeper")};
  if (opts.mode == job_mode::dp)
    config.no_servers =
        "a data-parallel job has no servers (--mode dp, or --mode hybrid with a task without "
        "embedding tables)";
  auto gk = sys.spawn(gatekeeper, config);
  auto port = net::publish(gk, opts.listen.port, opts.listen.host);
  if (!port) {
    fmt::print(stderr, "{}: cannot listen on {}: {}\n", app.name, to_string(opts.listen),
               sys.render(port.error()));
    self->send_exit(coord, caf::exit_reason::user_shutdown);
    self->send_exit(gk, caf::exit_reason::user_shutdown);
    return std::nullopt;
  }
  log.info("listening on {}:{}", opts.listen.host, *port);
  return gk;
}

int serve_coordinator(caf::scoped_actor& self, const launch_options& opts,
                      const coordinator_actor& coord, const app_description& app,
                      const logger& log) {
  auto gk = publish_gatekeeper(self, opts, coord, app, log);
  if (!gk) return 1;
  auto dashboard = start_dashboard(self->system(), opts, coord, log);
  if (!dashboard) {
    fmt::print(stderr, "{}: {}\n", app.name, describe(dashboard.error()));
    self->send_exit(coord, caf::exit_reason::user_shutdown);
    self->send_exit(*gk, caf::exit_reason::user_shutdown);
    return 1;
  }
  const int code = wait_for(self, coord.address(), app.name);
  dashboard->reset();  // before the actor system: its sampler asks the coordinator
  self->send_exit(*gk, caf::exit_reason::user_shutdown);
  return code;
}

}  // namespace launch_detail

using namespace launch_detail;

namespace {

// --mode dp and hybrid, every member in this process: the coordinator, --workers trainers
// (whose collectives still go over loopback TCP, Gloo) and, for hybrid, --servers servers.
int run_dp_embedded(const launch_options& opts, std::shared_ptr<const training_task> task,
                    const app_description& app, const logger& log) {
  return with_node(opts, app, log, [&](caf::scoped_actor& self, node_metrics& metrics) {
    auto& sys = self->system();
    size_blas(opts, opts.workers);
    job_config config{opts, task, self->address(), log.named("coordinator"), metrics.registry};
    config.activity = std::make_shared<activity_board>();
    const coordinator_actor coord = sys.spawn(coordinator, config);
    for (uint32_t i = 0; opts.hybrid() && i < opts.servers; ++i) {
      const std::string name = "server-" + std::to_string(i);
      sys.spawn(server,
                server_config{fixed_link(coord), name, opts.request_timeout, self->address(),
                              log.named(name), endpoint{}, opts.max_restarts, opts.restart_period,
                              metrics.registry, std::nullopt, app.rules});
    }
    const auto link = fixed_link(coord, config.activity);
    for (uint32_t i = 0; i < opts.workers; ++i) {
      const std::string name = "worker-" + std::to_string(i);
      spawn_trainer(sys, opts, task, link, name, self->address(), log.named(name), app.rules);
    }
    return wait_for(self, coord.address(), app.name);
  });
}

// --mode dp and hybrid, the coordinator's process: it publishes the gatekeeper, which hands out
// the coordinator; under torchrun (RANK 0) it also runs one trainer.
int run_dp_coordinator(const launch_options& opts, std::shared_ptr<const training_task> task,
                       const app_description& app, const logger& log) {
  return with_node(opts, app, log, [&](caf::scoped_actor& self, node_metrics& metrics) {
    auto& sys = self->system();
    size_blas(opts, 1);
    job_config config{opts, task, self->address(), log.named("coordinator"), metrics.registry};
    config.activity = std::make_shared<activity_board>();
    const coordinator_actor coord = sys.spawn(coordinator, config);
    auto gk = publish_gatekeeper(self, opts, coord, app, log);
    if (!gk) return 1;
    if (opts.dp.coordinator_trains)
      spawn_trainer(sys, opts, task, fixed_link(coord, config.activity),
                    node_name(opts) + "-trainer", self->address(), log.named("trainer"), app.rules);
    const int code = wait_for(self, coord.address(), app.name);
    self->send_exit(*gk, caf::exit_reason::user_shutdown);
    return code;
  });
}

int run_embedded(const launch_options& opts, std::shared_ptr<const training_task> task,
                 const app_description& app, const logger& log) {
  return with_node(opts, app, log, [&](caf::scoped_actor& self, node_metrics& metrics) {
    auto& sys = self->system();
    auto device = start_dash_device(sys, opts, log);
    if (!device) {
      fmt::print(stderr, "{}: --dash-device gpu: {}\n", app.name, describe(device.error()));
      return 1;
    }
    size_blas(opts, opts.workers);
    job_config config{opts, task, self->address(), log.named("coordinator"), metrics.registry};
    config.activity = std::make_shared<activity_board>();
    const coordinator_actor coord = sys.spawn(coordinator, config);
    const auto link = fixed_link(coord, config.activity);
    for (uint32_t i = 0; i < opts.servers; ++i) {
      const std::string name = "server-" + std::to_string(i);
      sys.spawn(server,
                server_config{fixed_link(coord), name, opts.request_timeout, self->address(),
                              log.named(name), endpoint{}, opts.max_restarts, opts.restart_period,
                              metrics.registry, *device, app.rules});
    }
    for (uint32_t i = 0; i < opts.workers; ++i) {
      const std::string name = "worker-" + std::to_string(i);
      sys.spawn<caf::detached>(
          worker, worker_config{link, task, name, opts.request_timeout, self->address(),
                                log.named(name), metrics.registry});
    }
    const int code = wait_for(self, coord.address(), app.name);
    if (*device) self->send_exit(**device, caf::exit_reason::user_shutdown);
    return code;
  });
}

int run_coordinator(const launch_options& opts, std::shared_ptr<const training_task> task,
                    const app_description& app, const logger& log) {
  return with_node(opts, app, log, [&](caf::scoped_actor& self, node_metrics& metrics) {
    auto& sys = self->system();
    size_blas_for_coordinator(opts);
    const coordinator_actor coord = sys.spawn(
        coordinator,
        job_config{opts, task, self->address(), log.named("coordinator"), metrics.registry});
    return serve_coordinator(self, opts, coord, app, log);
  });
}

// A server opens its own port so that workers connect to it directly; without one, all data
// would travel through the coordinator's node.
endpoint open_data_port(caf::actor_system& sys, const launch_options& opts, const logger& log) {
  auto port = net::open(sys, opts.listen.port, opts.listen.host);
  if (port) return endpoint{opts.listen.host, *port};
  log.warn("cannot open {} for workers ({}); data goes through the coordinator",
           to_string(opts.listen), sys.render(port.error()));
  return endpoint{};
}

// A server's data lane, beside its CAF port on the same host (any free port); none when
// lanes are not allowed or it cannot listen (workers then use CAF alone).
std::shared_ptr<lane_listener> open_lane_port(caf::actor_system& sys, const launch_options& opts,
                                              endpoint& data, const logger& log) {
  if (data.port == 0 || !lanes_allowed(sys, opts)) return nullptr;
  const std::chrono::milliseconds timeout = opts.request_timeout;
  auto lanes = lane_listener::start(
      sys, lane_listener_config{opts.listen.host, 0, opts.secret, timeout, log.named("data-lane")});
  if (!lanes) {
    log.warn("no data lane ({}); pushes and pulls go over CAF", describe(lanes.error()));
    return nullptr;
  }
  data.lane = (*lanes)->port();
  return std::move(*lanes);
}

template <class Spawn>
int run_member(const launch_options& opts, role as, const app_description& app, const logger& log,
               Spawn spawn) {
  exit_bound ending{opts, app};
  caf::actor_system& sys = ending.system();
  const std::string name = node_name(opts);
  node_metrics metrics;
  if (auto err = start_metrics(opts, log, metrics)) {
    fmt::print(stderr, "{}: {}\n", app.name, describe(err));
    return 1;
  }
  host_port joined;
  auto coord = join_cluster(sys, opts, as, name, log, &joined);
  if (!coord && has_code(coord.error(), errc::not_needed)) {
    fmt::print(stderr, "{}: not needed: {}\n", app.name, describe(coord.error()));
    return ending.returns(0);
  }
  if (!coord) {
    fmt::print(stderr, "{}: cannot join the job: {}\n", app.name, describe(coord.error()));
    return 1;
  }
  // With a standby listed, the members follow a takeover.
  const bool standby_listed = opts.coordinators.size() > 1;
  auto link = std::make_shared<coordinator_link>(*coord, standby_listed);
  caf::scoped_actor self{sys};
  // Held here: a supervisor nobody references would end as unreachable.
  const caf::actor actor = spawn(sys, link, name, self->address(), metrics.registry);
  if (!actor) return 1;  // `spawn` said why
  // Heartbeats come from their own small actor, so a long gradient step cannot silence them.
  auto beats = sys.spawn(coordinator_watch, coordinator_watch_config{link, name, as, opts, joined,
                                                                     self->address(), log});
  const int code = wait_for(self, actor.address(), app.name, &link->activity());
  self->send_exit(beats, caf::exit_reason::user_shutdown);
  return ending.returns(code);
}

// Whether a restart can mend a worker that ended with `reason`: a crash can, but not the job
// ending, a lost coordinator or a refused join (errc::job_failed and the other troupe errors
// a worker ends with on purpose).
bool worker_restart_mends(const caf::error& reason) {
  if (!reason) return false;
  return reason.category() != error_category ||
         reason.code() == static_cast<uint8_t>(errc::injected_fault);
}

// A worker node: its supervisor restarts the worker after a crash (it rejoins the job cold,
// under the same name, as a late worker) and ends with it otherwise.
caf::actor spawn_worker_node(caf::actor_system& sys, const launch_options& opts,
                             std::shared_ptr<const training_task> task, coordinator_link_ptr coord,
                             const std::string& name, caf::actor_addr parent, const logger& log,
                             std::shared_ptr<metrics_registry> metrics) {
  child_spec child;
  child.name = name;
  child.policy = restart_policy::transient;
  child.restart_on = worker_restart_mends;
  child.start = [=](caf::local_actor* self, caf::actor_addr supervisor) {
    worker_config config{coord, task, name, opts.request_timeout, supervisor, log, metrics};
    config.host_label = host_label_of(opts);
    if (lanes_allowed(self->system(), opts)) config.lane_secret = opts.secret;
    config.share_cores = [blas = opts.blas_threads](uint32_t workers_on_host) {
      if (blas == 0) size_blas_for(workers_on_host);
    };
    return caf::actor_cast<caf::actor>(self->spawn<caf::detached>(worker, config));
  };
  supervisor_config node;
  node.name = name + " supervisor";
  node.max_restarts = opts.max_restarts;
  node.period = opts.restart_period;
  node.backoff = std::chrono::milliseconds(100);
  node.parent = parent;
  node.quit_when_idle = true;
  node.log = log;
  return caf::actor_cast<caf::actor>(sys.spawn(supervisor, node, std::vector<child_spec>{child}));
}

// errc::bad_configuration when the task has what --mode cannot train: embedding tables live on
// the parameter service (not --mode dp), and model buffers follow DDP (not --mode ps); or a
// table that cannot be held (check_table).
caf::error check_task_fits_mode(const training_task& task, const launch_options& opts) {
  for (const auto& t : task.sparse_tables())
    if (auto err = check_table(t)) return err;
  if (opts.mode == job_mode::dp && !task.sparse_tables().empty())
    return make_error(errc::bad_configuration,
                      "--mode dp: this task's embedding tables live on the parameter service; run "
                      "it with --mode ps, or --mode hybrid (the dense parameters allreduced)");
  const auto specs = task.parameters();
  const bool buffers =
      std::any_of(specs.begin(), specs.end(), [](const tensor_spec& t) { return t.buffer; });
  if (opts.diloco_mode() && !task.sparse_tables().empty())
    return make_error(errc::bad_configuration,
                      "--mode diloco: this task's embedding tables are sparse, and a round's "
                      "pseudo-gradient is dense; run it with --mode ps or --mode hybrid");
  if (opts.parameter_service() && buffers)
    return make_error(
        errc::bad_configuration,
        std::string{"--mode "} + to_string(opts.mode) +
            ": this model has buffers (BatchNorm's running statistics), which "
            "follow DDP (every member takes the first member's each step); run it with "
            "--mode dp or --mode hybrid");
  return {};
}

// The handshake is only as strong as the secret (docs/SECURITY.md).
void warn_about_the_secret(const std::vector<std::string>& args, const launch_options& opts,
                           const logger& log) {
  if (opts.secret.size() < 16)
    log.warn(
        "the cluster secret has fewer than 16 characters: whoever sees one handshake can "
        "guess it offline; use a long random secret");
  for (const auto& arg : args)
    if (arg == "--secret" || arg.rfind("--secret=", 0) == 0)
      return log.warn(
          "--secret on the command line is visible to every local user; prefer "
          "TROUPE_SECRET");
}

}  // namespace

int run_app(int argc, char** argv, const app_description& app) {
  const std::string blas_note = select_blas_kernels();  // before any BLAS call
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto opts = parse_launch_options(args, process_environment(), app.flags, app.defaults);
  if (!opts) {
    fmt::print(stderr, "{}: {}\n", app.name, describe(opts.error()));
    return 2;
  }
  if (opts->help) {
    fmt::print("{}", launch_usage(app.name, app.summary, app.flags, app.defaults));
    return 0;
  }
  if (auto err = check_rule(optimizer_from(*opts), app.rules)) {
    fmt::print(stderr,
               "{}: --optimizer {}: not built in (adam, adamw, sgd, momentum, dash) and "
               "not a rule of this app ({})\n",
               app.name, opts->optimizer_rule, app.rules.names());
    return 2;
  }
  const logger log{node_name(*opts), opts->level};
  if (!blas_note.empty()) log.debug("{}", blas_note);
  // A peer that closed its connection must give a write error, not kill the process: Gloo
  // writes to its sockets without MSG_NOSIGNAL (a resumed dp worker whose group moved on
  // died of SIGPIPE, silently).
  std::signal(SIGPIPE, SIG_IGN);
  if (opts->role != node_role::embedded) warn_about_the_secret(args, *opts, log);
  if (opts->role == node_role::server) {
    // A server's buckets run side by side on the actor scheduler: one BLAS thread each (DASH's
    // GEMMs), not OpenBLAS's default of one per core in every bucket at once.
    set_blas_threads(static_cast<int>(opts->blas_threads ? opts->blas_threads : 1));
    return run_member(
        *opts, role::server, app, log,
        [&](caf::actor_system& sys, coordinator_link_ptr coord, const std::string& name,
            caf::actor_addr supervisor, std::shared_ptr<metrics_registry> metrics) {
          endpoint data = open_data_port(sys, *opts, log);
          auto lanes = open_lane_port(sys, *opts, data, log);
          // Unreferenced once the server and its buckets end: it ends with them.
          auto device = start_dash_device(sys, *opts, log);
          if (!device) {
            log.error("--dash-device gpu: {}", describe(device.error()));
            return caf::actor{};
          }
          server_config config{coord,
                               name,
                               opts->request_timeout,
                               supervisor,
                               log,
                               data,
                               opts->max_restarts,
                               opts->restart_period,
                               std::move(metrics),
                               *device,
                               app.rules,
                               std::move(lanes)};
          return caf::actor_cast<caf::actor>(sys.spawn(server, config));
        });
  }
  auto made = app.make_task(*opts);
  if (!made) {  // a task that cannot be built (its parameters or initialize raised): refused
    fmt::print(stderr, "{}: {}\n", app.name, describe(made.error()));
    return 2;
  }
  std::shared_ptr<const training_task> task = std::move(*made);
  if (auto err = check_task_fits_mode(*task, *opts)) {
    fmt::print(stderr, "{}: {}\n", app.name, describe(err));
    return 2;
  }
  if (opts->hybrid() && task->sparse_tables().empty()) {
    // Nothing for the servers to hold: the dense parameters are the whole model.
    log.info("the task has no embedding tables: --mode hybrid trains as --mode dp");
    opts->mode = job_mode::dp;
  }
  if (opts->data_parallel()) {
    if (auto err = check_nccl(*opts)) {
      fmt::print(stderr, "{}: --collective nccl: {}\n", app.name, describe(err));
      return 1;
    }
    switch (opts->role) {
      case node_role::embedded:
        return run_dp_embedded(*opts, task, app, log);
      case node_role::coordinator:
        if (opts->standby_of.port != 0) return run_standby(*opts, task, app, log);
        return run_dp_coordinator(*opts, task, app, log);
      default:
        break;
    }
    size_blas(*opts, 1);
    return run_member(
        *opts, role::worker, app, log,
        [&](caf::actor_system& sys, coordinator_link_ptr coord, const std::string& name,
            caf::actor_addr parent, std::shared_ptr<metrics_registry>) {
          return spawn_trainer(sys, *opts, task, coord, name, parent, log, app.rules);
        });
  }
  switch (opts->role) {
    case node_role::embedded:
      return run_embedded(*opts, task, app, log);
    case node_role::coordinator:
      if (opts->standby_of.port != 0) return run_standby(*opts, task, app, log);
      return run_coordinator(*opts, task, app, log);
    case node_role::worker:
      size_blas(*opts, 1);
      return run_member(
          *opts, role::worker, app, log,
          [&](caf::actor_system& sys, coordinator_link_ptr coord, const std::string& name,
              caf::actor_addr parent, std::shared_ptr<metrics_registry> metrics) {
            return spawn_worker_node(sys, *opts, task, coord, name, parent, log,
                                     std::move(metrics));
          });
    case node_role::server:
      break;
  }
  return 1;
}

}  // namespace troupe
