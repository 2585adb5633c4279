// app_node (troupe/app_node.hpp): the console's view of an app of its own actors. The node
// publishes the same gatekeeper as a job's coordinator; past the handshake the console talks
// to an inspector actor that speaks the coordinator's interface, answers `tree` and `nodes`
// from the supervisors the app showed, sets log levels, and refuses what needs a job.
#include "troupe/app_node.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <caf/io/middleman.hpp>
#include <caf/send.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "actors/app/parameter_service_parts.hpp"
#include "actors/supervision/admission/gatekeeper.hpp"
#include "actors/supervision/admission/operator_gate.hpp"
#include "actors/supervision/supervisors/supervisor.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/error.hpp"
#include "troupe/net.hpp"
#include "troupe/node.hpp"

namespace troupe {

// The supervisors the app showed, read by the inspector and written by show().
struct shown_supervisors {
  std::mutex lock;
  std::vector<std::pair<std::string, supervisor_actor>> entries;

  std::vector<std::pair<std::string, supervisor_actor>> copy() {
    std::lock_guard<std::mutex> guard{lock};
    return entries;
  }
};

// The parameter services the app serves, by name, read by the inspector and written by serve().
struct served_services {
  std::mutex lock;
  std::map<std::string, std::shared_ptr<parameter_service::shared>> entries;
  std::map<std::string, caf::actor> groups;  // loop groups (actors/dp/loops/loop_group.hpp)
  caf::actor servers_join;  // the service on servers whose coordinator servers join (none: none)

  std::shared_ptr<parameter_service::shared> find(const std::string& name) {
    std::lock_guard<std::mutex> guard{lock};
    auto it = entries.find(name);
    return it == entries.end() ? nullptr : it->second;
  }
};

struct app_node::shared {
  std::string name;
  uint16_t port = 0;
  std::shared_ptr<shown_supervisors> shown;
  std::shared_ptr<served_services> served;
  coordinator_actor inspector;
  gatekeeper_actor gatekeeper;
  caf::actor_system* sys = nullptr;
  std::shared_ptr<lane_listener> lane;  // the data lane of the services it serves (none: CAF)
  std::string lane_secret;              // for data lanes to servers ("": TLS, --no-data-lane)
  launch_options opts;                  // as started (a service on servers' coordinator's too)
};

namespace {

struct inspector_state {
  static inline const char* name = "troupe.app_inspector";
  operator_gate operators{{}, {}};
};
using inspector_ptr = coordinator_actor::stateful_pointer<inspector_state>;

struct inspector_config {
  std::string name;
  std::string address;
  std::shared_ptr<shown_supervisors> shown;
  std::chrono::milliseconds timeout;
  logger log;
  std::shared_ptr<served_services> served;
  std::string tls_dir;  // and the operator secret: who may change the log level
  std::string operator_secret;
  uint16_t lane_port = 0;  // the node's data lane (0: none)
};

caf::error no_job(const std::string& what) {
  return make_error(errc::bad_configuration,
                    what + ": this node runs an app's own actors, not a training job");
}

// The tree: the node, each supervisor it showed, and their children, asked of each
// supervisor at once (one that does not answer in time shows as "silent").
caf::result<wire> tree(inspector_ptr self, const inspector_config& config) {
  const auto shown = config.shown->copy();
  auto promise = self->make_response_promise<wire>();
  auto parts = std::make_shared<std::vector<std::optional<table_view>>>(shown.size());
  auto waiting = std::make_shared<size_t>(shown.size());
  auto finish = [=]() mutable {
    table_view t{{"actor", "kind", "node", "state", "restarts", "mailbox"}, {}};
    t.rows.push_back({config.name, "node", config.name, "live", "-", "-"});
    for (size_t i = 0; i < shown.size(); ++i) {
      const auto& part = (*parts)[i];
      t.rows.push_back(
          {"  " + shown[i].first, "supervisor", config.name, part ? "live" : "silent", "-", "-"});
      if (part)
        for (const auto& row : part->rows)
          t.rows.push_back({"    " + row[0], row[1], config.name, row[2], row[3], "-"});
    }
    promise.deliver(encode(t));
  };
  if (shown.empty()) finish();
  for (size_t i = 0; i < shown.size(); ++i)
    self->request(shown[i].second, config.timeout, inspect_atom_v)
        .then(
            [=](const wire& w) mutable {
              if (auto t = decode<table_view>(w); t && t->columns.size() == 4) (*parts)[i] = *t;
              if (--*waiting == 0) finish();
            },
            [=](caf::error&) mutable {
              if (--*waiting == 0) finish();
            });
  return promise;
}

// The coordinator of the service on servers that this node's servers hold (none: none).
coordinator_actor servers_coordinator(served_services& served) {
  std::lock_guard<std::mutex> guard{served.lock};
  return caf::actor_cast<coordinator_actor>(served.servers_join);
}

// The nodes: this one, and those of its service on servers (its coordinator, in this process,
// and the servers, as a job's coordinator lists them), asked of that coordinator.
caf::result<wire> nodes(inspector_ptr self, const inspector_config& config) {
  table_view app{{"role", "name", "address", "state", "pid"}, {}};
  app.rows.push_back({"app", config.name, config.address, "live", std::to_string(::getpid())});
  auto service = servers_coordinator(*config.served);
  if (!service) return encode(app);
  auto promise = self->make_response_promise<wire>();
  self->request(service, config.timeout, inspect_atom_v, std::string{"nodes"})
      .then(
          [=](const wire& w) mutable {
            auto t = decode<table_view>(w);
            if (!t || t->columns.size() < 5) {
              promise.deliver(encode(app));
              return;
            }
            std::vector<std::string> row(t->columns.size(), "-");
            std::copy_n(app.rows[0].begin(), 4, row.begin());  // role, name, address, state
            t->rows.insert(t->rows.begin(), std::move(row));
            promise.deliver(encode(*t));
          },
          [=](caf::error&) mutable { promise.deliver(encode(app)); });
  return promise;
}

caf::result<wire> inspect(inspector_ptr self, const inspector_config& config,
                          const std::string& view) {
  if (view == "tree") return tree(self, config);
  if (view == "nodes") return nodes(self, config);
  if (view == "buckets" || view == "diag" || view == "metrics")
    if (auto service = servers_coordinator(*config.served))
      return self->delegate(service, inspect_atom_v, view);
  return make_error(errc::bad_configuration,
                    "no view '" + view +
                        "' on an app node (nodes, tree; buckets, diag and metrics of a "
                        "parameter service on servers)");
}

// An operator's action on an app node: only `log LEVEL` means anything here.
caf::result<std::string> operate(const inspector_config& config,
                                 const std::vector<std::string>& action) {
  if (action.front() != "log") return no_job(action.front());
  const std::string level = action.size() > 1 ? action[1] : "";
  log_level to;
  if (!parse_log_level(level, to))
    return make_error(errc::bad_configuration, "unknown log level '" + level + "'");
  config.log.set_level(to);
  return config.name + " logs at " + level;
}

coordinator_actor::behavior_type inspector(inspector_ptr self, inspector_config config) {
  self->state.operators = operator_gate{config.tls_dir, config.operator_secret};
  return {
      [=](join_atom, const wire&, const server_actor&) -> caf::result<wire> {
        return no_job("joining as a server");
      },
      [=](join_atom, const wire&, const worker_actor&) -> caf::result<wire> {
        return no_job("joining as a worker");
      },
      [=](claim_atom, uint32_t, uint32_t) -> caf::result<wire> { return no_job("claiming work"); },
      [=](progress_atom, const wire&) {},
      [=](done_atom, uint32_t) {},
      [=](heartbeat_atom, const wire&) -> uint64_t { return 0; },
      [=](tick_atom) {},
      [=](follow_atom, const standby_actor&) -> caf::result<uint64_t> {
        return no_job("following a coordinator");
      },
      [=](rejoin_atom, const wire&, const server_actor&,
          const std::vector<bucket_actor>&) -> caf::result<wire> { return no_job("rejoining"); },
      [=](rejoin_atom, const wire&, const worker_actor&) -> caf::result<wire> {
        return no_job("rejoining");
      },
      [=](which_atom, uint32_t, const bucket_actor&) -> caf::result<bucket_actor> {
        return no_job("finding a bucket");
      },
      [=](moved_atom, uint32_t, const bucket_actor&) {},
      [=](backup_atom, uint32_t, const bucket_actor&, const bucket_actor&) {},
      [=](escalate_atom, const std::string&) {},
      [=](inspect_atom, const std::string& view) { return inspect(self, config, view); },
      [=](nonce_atom) { return self->state.operators.fresh_nonce(); },
      [=](operate_atom, const wire& w) -> caf::result<std::string> {
        auto action = self->state.operators.check(w);
        if (!action) return std::move(action.error());
        return operate(config, *action);
      },
      [=](service_atom,
          const std::string& name) -> caf::result<wire, caf::actor, std::vector<bucket_actor>> {
        auto service = config.served->find(name);
        if (!service)
          return make_error(errc::bad_configuration,
                            "this node serves no parameter service '" + name + "'");
        auto directory = directory_of(*service);
        if (!service->coordinator) {
          directory.lane = config.lane_port;
          return {encode(directory), service->supervisor, service->buckets};
        }
        // On servers: the buckets as they are now (a backup may have taken over), and the
        // servers to reach them at.
        auto promise = self->make_response_promise<wire, caf::actor, std::vector<bucket_actor>>();
        self->request(caf::actor_cast<coordinator_actor>(service->coordinator), config.timeout,
                      tables_atom_v)
            .then(
                [=](std::vector<bucket_actor> buckets, const std::string& servers) mutable {
                  auto with_servers = directory;
                  with_servers.servers = servers;
                  promise.deliver(encode(with_servers), service->coordinator, std::move(buckets));
                },
                [=](caf::error& err) mutable { promise.deliver(std::move(err)); });
        return promise;
      },
      [=](tables_atom) -> caf::result<std::vector<bucket_actor>, std::string> {
        return no_job("tables");
      },
      [=](group_atom, const std::string& name) -> caf::result<caf::actor> {
        std::lock_guard<std::mutex> guard{config.served->lock};
        auto it = config.served->groups.find(name);
        if (it == config.served->groups.end())
          return make_error(errc::bad_configuration,
                            "this node serves no loop group '" + name + "'");
        return it->second;
      },
      [=](stop_atom, const std::string&) {
        config.log.warn("ignored a stop: an app node runs no job");
      },
  };
}

}  // namespace

namespace {

// The data lane of the services this node will serve, as a server node has one: not under
// TLS (it is not encrypted), not with --no-data-lane. None when it cannot listen (a warning):
// the services' clients then go over CAF.
std::shared_ptr<lane_listener> start_lane(caf::actor_system& sys, const launch_options& opts,
                                          const logger& log) {
  if (!opts.tls_dir.empty() || opts.no_data_lane) return nullptr;
  lane_listener_config config{
      opts.listen.host, 0, opts.secret,
      std::chrono::duration_cast<std::chrono::milliseconds>(opts.request_timeout),
      log.named("lane")};
  auto lane = lane_listener::start(sys, config);
  if (!lane) {
    log.warn("no data lane ({}); served services go over CAF", describe(lane.error()));
    return nullptr;
  }
  return std::move(*lane);
}

}  // namespace

caf::expected<app_node> app_node::start(caf::actor_system& sys, const launch_options& opts,
                                        const logger& log) {
  if (opts.secret.empty())
    return make_error(errc::bad_configuration, "an app node needs the cluster secret (--secret)");
  auto sh = std::make_shared<shared>();
  sh->name = node_name(opts);
  sh->shown = std::make_shared<shown_supervisors>();
  sh->served = std::make_shared<served_services>();
  sh->sys = &sys;
  sh->lane = start_lane(sys, opts, log);
  sh->inspector = sys.spawn(
      inspector, inspector_config{sh->name, to_string(opts.listen), sh->shown, opts.request_timeout,
                                  log, sh->served, opts.tls_dir, opts.operator_secret,
                                  sh->lane ? sh->lane->port() : uint16_t{0}});
  if (opts.tls_dir.empty() && !opts.no_data_lane) sh->lane_secret = opts.secret;
  sh->opts = opts;
  gatekeeper_config doors{opts.secret, sh->inspector, sh->inspector.address(),
                          log.named("gatekeeper")};
  doors.servers_join = [served = sh->served] { return servers_coordinator(*served); };
  sh->gatekeeper = sys.spawn(gatekeeper, doors);
  auto port = net::publish(sh->gatekeeper, opts.listen.port, opts.listen.host);
  if (!port) {
    app_node{sh}.stop();
    return make_error(
        errc::io_failure,
        fmt::format("cannot listen on {}: {}", to_string(opts.listen), sys.render(port.error())));
  }
  sh->port = *port;
  log.info("console endpoint on {}:{}", opts.listen.host, *port);
  return app_node{std::move(sh)};
}

void app_node::show(const std::string& name, const caf::actor& supervisor) const {
  std::lock_guard<std::mutex> guard{shared_->shown->lock};
  shared_->shown->entries.emplace_back(name, caf::actor_cast<supervisor_actor>(supervisor));
}

caf::expected<caf::actor> app_node::join(caf::actor_system& sys, const launch_options& opts,
                                         const logger& log) {
  auto node = join_cluster(sys, opts, role::worker, node_name(opts), log);
  if (!node) return std::move(node.error());
  return caf::actor_cast<caf::actor>(*node);
}

caf::expected<servers_admission> admit_servers_for(
    const app_node& node, const std::function<caf::actor(const launch_options&)>& coordinator) {
  auto served = node.shared_->served;
  std::lock_guard<std::mutex> guard{served->lock};
  if (served->servers_join)
    return make_error(errc::bad_configuration,
                      "this app node's servers already hold another parameter service");
  servers_admission out{coordinator(node.shared_->opts), node.shared_->lane_secret, {}};
  served->servers_join = out.coordinator;
  // (Weakly: a service the node serves must not keep the node.)
  out.release = [weak = std::weak_ptr<served_services>(served), at = out.coordinator] {
    if (auto served = weak.lock()) {
      std::lock_guard<std::mutex> guard{served->lock};
      if (served->servers_join == at) served->servers_join = nullptr;
    }
  };
  // However the coordinator ends (stopped, or failed on its own), the servers are free again.
  out.coordinator->attach_functor([release = out.release] { release(); });
  return out;
}

void app_node::serve(const std::string& name, const parameter_service& service) const {
  const bool in_process = service.shared_->owned && !service.shared_->coordinator;
  if (shared_->lane && in_process) service.shared_->enrollment->add_lane(shared_->lane);
  std::lock_guard<std::mutex> guard{shared_->served->lock};
  shared_->served->entries[name] = service.shared_;
}

void app_node::serve_group(const std::string& name, const caf::actor& group) const {
  std::lock_guard<std::mutex> guard{shared_->served->lock};
  shared_->served->groups[name] = group;
}

uint16_t app_node::port() const {
  return shared_->port;
}

void app_node::stop() const {
  if (shared_->lane) shared_->lane->stop();
  if (shared_->port) net::unpublish(*shared_->sys, shared_->gatekeeper.address(), shared_->port);
  caf::anon_send_exit(shared_->gatekeeper, caf::exit_reason::kill);
  caf::anon_send_exit(shared_->inspector, caf::exit_reason::kill);
}

}  // namespace troupe
