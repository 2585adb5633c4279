// parameter_service::start on server nodes (troupe/parameter_service.hpp): the service's
// coordinator (actors/coordinator, given the buckets ready-made) admits the servers that join
// the app node, places each bucket with its chain of backups, and from then on names a
// bucket's successor and recovers lost servers, as it does for a job; this process's clients
// reach the servers directly, over their data lanes.
#include <fmt/format.h>

#include <caf/scoped_actor.hpp>

#include "actors/app/parameter_service_parts.hpp"
#include "actors/coordinator/coordinator.hpp"
#include "actors/transport/server_links.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// The most servers one service waits for: more than any machine room gives one app.
constexpr uint32_t max_service_servers = 1024;

// The job flags the service's coordinator goes by: the app node's (its address, heartbeats,
// TLS, operators), with the service's servers and copies, no workers, the service's bounds
// (its requests' timeout, whole seconds), and none of a job's files.
launch_options coordinator_options(launch_options o, const parameter_service_config& config) {
  o.mode = job_mode::ps;
  o.servers = config.servers;
  o.workers = 0;
  o.replication = config.replication;
  o.request_timeout =
      std::max(std::chrono::seconds(1), std::chrono::ceil<std::chrono::seconds>(config.timeout));
  o.join_timeout = std::chrono::ceil<std::chrono::seconds>(config.join_timeout);
  o.name = config.name;
  o.report.clear();
  o.checkpoint_dir.clear();
  o.resume.clear();
  o.tensorboard.clear();
  return o;
}

caf::error check_servers(const parameter_service_config& config) {
  if (config.servers > max_service_servers)
    return make_error(errc::bad_configuration,
                      fmt::format("{} servers for one service (at most {})", config.servers,
                                  max_service_servers));
  if (config.replication == 0 || config.replication > config.servers)
    return make_error(errc::bad_configuration,
                      fmt::format("replication {} on {} servers: each copy of a bucket needs a "
                                  "server of its own (1 .. servers)",
                                  config.replication, config.servers));
  return {};
}

// Stops the coordinator (and the servers that joined it) and waits for it to end, at most
// `bound`.
void stop_coordinator(caf::actor_system& sys, const caf::actor& coordinator,
                      std::chrono::milliseconds bound) {
  caf::scoped_actor self{sys};
  self->monitor(coordinator);
  // (From this process: the coordinator takes a stop from its own process only.)
  self->send(caf::actor_cast<coordinator_actor>(coordinator), stop_atom_v, std::string{});
  self->receive([](const caf::down_msg&) {}, caf::after(bound) >> [] {});
}

using buckets_and_servers = std::pair<std::vector<bucket_actor>, std::string>;

// The coordinator's buckets and its servers' list (to_server_list), once every bucket has a
// primary; its error, or errc::timeout past `bound`.
caf::expected<buckets_and_servers> ask_tables(caf::actor_system& sys, const caf::actor& coordinator,
                                              std::chrono::milliseconds bound) {
  caf::scoped_actor self{sys};
  caf::expected<buckets_and_servers> out = make_error(errc::timeout, "no answer");
  self->request(caf::actor_cast<coordinator_actor>(coordinator), bound, tables_atom_v)
      .receive(
          [&](std::vector<bucket_actor>& buckets, std::string& servers) {
            out = buckets_and_servers{std::move(buckets), std::move(servers)};
          },
          [&](caf::error& err) { out = std::move(err); });
  return out;
}

// Waits (at most config.join_timeout) for the servers to join and hold every bucket.
caf::expected<buckets_and_servers> wait_for_buckets(caf::actor_system& sys,
                                                    const caf::actor& coordinator,
                                                    const parameter_service_config& config) {
  auto placed = ask_tables(sys, coordinator, config.join_timeout);
  if (!placed && placed.error() == caf::sec::request_timeout)
    return make_error(errc::timeout,
                      fmt::format("service '{}': {} servers did not join within {} ms (run them "
                                  "with --role server --coordinator at this app node)",
                                  config.name, config.servers, config.join_timeout.count()));
  return placed;
}

}  // namespace

caf::expected<parameter_service> parameter_service::start(caf::actor_system& sys,
                                                          const app_node& node,
                                                          parameter_service_config config) {
  if (config.servers == 0) return start(sys, std::move(config));
  if (auto err = check_servers(config)) return err;
  auto laid_out = lay_out_service(config, config.servers);
  if (!laid_out) return std::move(laid_out.error());
  auto sh = std::move(laid_out->shared);
  service_buckets buckets{config.tensors, sh->plan, {}};
  for (const auto& spec : laid_out->specs) buckets.specs.push_back(encode(spec));
  auto admitted = admit_servers_for(node, [&](const launch_options& node_opts) {
    job_config c{coordinator_options(node_opts, config), nullptr, caf::actor_addr{},
                 config.log.named(config.name + "/coordinator")};
    c.service = std::move(buckets);
    return caf::actor_cast<caf::actor>(sys.spawn(coordinator, std::move(c)));
  });
  if (!admitted) return std::move(admitted.error());
  sh->coordinator = admitted->coordinator;
  sh->release = admitted->release;
  auto placed = wait_for_buckets(sys, sh->coordinator, config);
  if (!placed) {
    parameter_service{sh}.stop();
    return std::move(placed.error());
  }
  auto servers = parse_server_list(placed->second);
  if (!servers) {
    parameter_service{sh}.stop();
    return std::move(servers.error());
  }
  sh->buckets = std::move(placed->first);
  sh->servers = std::move(*servers);
  connect_to_servers(sys, sh->servers, admitted->lane_secret, config.timeout, sh->log, sh->lanes,
                     "the service's pulls and pushes");
  sh->log.info("service '{}': {} buckets on {} servers, {} copies each", config.name,
               sh->buckets.size(), sh->servers.size(), config.replication);
  return parameter_service{std::move(sh)};
}

std::vector<bucket_actor> buckets_now(const parameter_service::shared& service) {
  auto now = ask_tables(service.coordinator->home_system(), service.coordinator, service.timeout);
  return now && now->first.size() == service.buckets.size() ? now->first : service.buckets;
}

void stop_service_on_servers(const parameter_service::shared& service) {
  stop_coordinator(service.coordinator->home_system(), service.coordinator,
                   service.timeout * 2 + std::chrono::seconds(1));
  if (service.release) service.release();
}

}  // namespace troupe
