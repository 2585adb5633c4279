// What troupe-console sees of an app of its own actors. app_node::start publishes the node's
// gatekeeper on --listen (the same handshake as a job's coordinator: a console must prove the
// cluster secret); show() puts a supervisor and its children in the console's `tree`, with
// their names, kinds, states and restarts. The console's `nodes` lists this node (and the
// servers of a parameter service it placed on servers, whose `buckets`, `diag` and `metrics`
// it shows too) and `log` changes its log level; the other job views (workers, curve) and the
// job commands (fault, checkpoint, drain) answer that this node runs no training job. serve()
// makes a parameter service reachable from actors in other processes that join the node with
// the same secret (parameter_service::connect).
// Start it from main() after the actor system; stop() unpublishes it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "troupe/log.hpp"
#include "troupe/options.hpp"
#include "troupe/parameter_service.hpp"

namespace troupe {

struct servers_admission;  // (internal: actors/app/parameter_service_parts.hpp)

class app_node {
 public:
  // Listens on opts.listen (port 0: any free port, see port()) for consoles that know
  // opts.secret; errc::bad_configuration without a secret, io_failure when it cannot listen.
  static caf::expected<app_node> start(caf::actor_system& sys, const launch_options& opts,
                                       const logger& log);

  // Joins the app node at opts.coordinators (the first that answers) with opts.secret (the same
  // handshake, retried until opts.join_timeout) from another process, and returns its handle for
  // parameter_service::connect. errc::authentication_failed for a wrong secret, errc::timeout
  // when nobody answers. From main(), not from inside an actor.
  static caf::expected<caf::actor> join(caf::actor_system& sys, const launch_options& opts,
                                        const logger& log);

  // Shows `supervisor` (from spawn_supervisor) as `name` in the console's tree, its children
  // below it.
  void show(const std::string& name, const caf::actor& supervisor) const;

  // Serves `service` as `name`: a node that joined with the secret gets its directory, its
  // supervisor and its buckets, and then pulls and pushes the buckets directly.
  void serve(const std::string& name, const parameter_service& service) const;

  // Serves the loop group `group` (spawn_loop_group in troupe/loop_group.hpp: the coordinator
  // of processes whose own loops reduce their gradients together) as `name`: a node that
  // joined with the secret finds it there (loop_member::join).
  void serve_group(const std::string& name, const caf::actor& group) const;

  uint16_t port() const;
  void stop() const;

  struct shared;

 private:
  // A parameter service on servers (parameter_service::start) has the node's servers join it.
  friend caf::expected<servers_admission> admit_servers_for(
      const app_node& node, const std::function<caf::actor(const launch_options&)>& coordinator);
  explicit app_node(std::shared_ptr<shared> s) : shared_(std::move(s)) {}
  std::shared_ptr<shared> shared_;
};

}  // namespace troupe
