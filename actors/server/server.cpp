#include "actors/server/server.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <caf/io/middleman.hpp>

#include "actors/bucket/parameter_bucket.hpp"
#include "actors/supervision/node_control.hpp"
#include "actors/supervision/node_metrics.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/error.hpp"
#include "troupe/net.hpp"

namespace troupe {

namespace {

using self_ptr = server_actor::stateful_pointer<server_state>;

// More than any job places on one server; a bound on what a confused coordinator can spawn.
constexpr size_t max_buckets_per_server = 1 << 14;

const std::string bucket_prefix = "bucket-";

// Joins the coordinator; a refusal or a lost coordinator ends this server with an error.
void join(self_ptr self, const server_config& config) {
  const join_request request{role::server, config.name, static_cast<uint32_t>(::getpid()),
                             config.data};
  self->request(config.coordinator->handle(), config.request_timeout, join_atom_v, encode(request),
                caf::actor_cast<server_actor>(self))
      .then(
          [=](const wire& w) {
            if (auto reply = decode<join_reply>(w)) {
              self->state.rank = reply->rank;
              config.coordinator->switch_to(config.coordinator->handle(), reply->term);
              config.log.info("joined as server {} of {}", reply->rank, reply->world_servers);
            } else
              self->quit(reply.error());
          },
          [=](caf::error& err) {
            config.log.error("the coordinator refused us: {}", describe(err));
            self->quit(std::move(err));
          });
}

// The child spec of one bucket: each (re)start spawns an actor around the same store.
std::shared_ptr<const child_spec> bucket_child(const server_config& config,
                                               std::shared_ptr<bucket_store> store) {
  const uint32_t id = store->id();
  auto spec = std::make_shared<child_spec>();
  spec->name = bucket_prefix + std::to_string(id);
  spec->start = [config, store, id](caf::local_actor* parent, caf::actor_addr supervisor) {
    const bucket_actor_config bucket_config{supervisor,
                                            config.coordinator,
                                            config.request_timeout,
                                            config.log.named("bucket-" + std::to_string(id)),
                                            config.metrics,
                                            config.dash_device};
    auto bucket = parent->spawn(parameter_bucket, store, bucket_config);
    if (config.lanes) config.lanes->enroll(bucket);
    return caf::actor_cast<caf::actor>(bucket);
  };
  return spec;
}

caf::result<bucket_actor> host(self_ptr self, const server_config& config, const wire& w) {
  auto& st = self->state;
  if (!sent_by(self, config.coordinator->address()))
    return make_error(errc::authentication_failed, "only the coordinator places buckets");
  if (st.hosted >= max_buckets_per_server)
    return make_error(errc::message_too_large, "this server hosts enough buckets");
  auto spec = decode<bucket_spec>(w);
  if (!spec) return std::move(spec.error());
  if (check_rule(spec->optimizer, config.rules)) {
    const auto why = fmt::format(
        "server '{}' cannot host bucket {}: no update rule '{}' here "
        "(this binary has: {})",
        config.name, spec->bucket, spec->optimizer.rule, config.rules.names());
    config.log.error("{}", why);
    return make_error(errc::bad_configuration, why);
  }
  ++st.hosted;
  auto store = std::make_shared<bucket_store>(std::move(*spec), config.rules);
  auto promise = self->make_response_promise<bucket_actor>();
  self->request(st.buckets, config.request_timeout, host_atom_v, bucket_child(config, store))
      .then(
          [=](const caf::actor& bucket) mutable {
            config.log.debug("hosting bucket {}", store->id());
            self->state.buckets_here[store->id()] = caf::actor_cast<bucket_actor>(bucket);
            promise.deliver(caf::actor_cast<bucket_actor>(bucket));
          },
          [=](caf::error& err) mutable { promise.deliver(std::move(err)); });
  return promise;
}

// The node's supervisor restarted a bucket: the coordinator hands out the new handle.
void moved(self_ptr self, const server_config& config, const std::string& name,
           const caf::actor& handle) {
  if (!sent_by(self, self->state.buckets.address()) || name.rfind(bucket_prefix, 0) != 0) return;
  const auto id = static_cast<uint32_t>(std::stoul(name.substr(bucket_prefix.size())));
  if (config.metrics)
    if (auto* restarts = config.metrics->counter("troupe_restarts_total", {config.name}))
      restarts->add(1);
  self->state.buckets_here[id] = caf::actor_cast<bucket_actor>(handle);
  self->send(config.coordinator->handle(), moved_atom_v, id, caf::actor_cast<bucket_actor>(handle));
}

// This process's coordinator watch found the coordinator of `term` (a standby that took over):
// the server registers again with the buckets it hosts. Term 0: no coordinator is left.
void rejoin(self_ptr self, const server_config& config, uint64_t term) {
  if (!self->current_sender() || self->current_sender()->node() != self->node()) return;
  if (term == 0) {
    config.log.error("lost the coordinator, and no standby took over");
    return self->quit(make_error(errc::job_failed, "lost the coordinator"));
  }
  auto& st = self->state;
  rejoin_request request{role::server, config.name, st.rank, config.data};
  std::vector<bucket_actor> handles;
  for (const auto& [id, handle] : st.buckets_here) {
    request.buckets.push_back(id);
    handles.push_back(handle);
  }
  const auto coordinator = config.coordinator->handle();
  self->monitor(coordinator);
  self->request(coordinator, config.request_timeout, rejoin_atom_v, encode(request),
                caf::actor_cast<server_actor>(self), std::move(handles))
      .then([=](const wire&) { config.log.info("rejoined the coordinator of term {}", term); },
            [=](caf::error& err) {
              config.log.error("the new coordinator refused us: {}", describe(err));
              self->quit(std::move(err));
            });
}

// Connects this node to another server's port. Runs detached: net::connect blocks.
caf::behavior connector(caf::event_based_actor* self, std::chrono::milliseconds timeout) {
  return {
      [=](const std::string& host, uint16_t port) -> caf::result<bool> {
        auto node = net::connect(self->system(), host, port, timeout);
        self->quit();
        if (!node) return make_error(errc::io_failure, self->system().render(node.error()));
        return true;
      },
  };
}

}  // namespace

server_actor::behavior_type server(self_ptr self, server_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  if (config.lanes) self->attach_functor([lanes = config.lanes] { lanes->stop(); });
  supervisor_config node;
  node.name = config.name + " supervisor";
  node.strategy = restart_strategy::one_for_one;
  node.max_restarts = config.max_restarts;
  node.period = config.restart_period;
  node.parent = self->address();
  node.observer = caf::actor_cast<caf::actor>(self);
  node.log = config.log;
  self->state.buckets =
      self->spawn<caf::linked>(supervisor, std::move(node), std::vector<child_spec>{});
  self->monitor(self->state.buckets);
  self->monitor(config.coordinator->handle());
  config.coordinator->subscribe(self->address());
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    if (st.stopping) return;
    if (msg.source == st.buckets.address()) {
      const std::string why = describe(msg.reason);
      config.log.error("the node supervisor gave up: {}", why);
      self->send(config.coordinator->handle(), escalate_atom_v, config.name + ": " + why);
      return self->quit(make_error(errc::job_failed, "the node supervisor gave up: " + why));
    }
    if (msg.source != config.coordinator->address()) return;
    if (config.coordinator->standby_listed())
      return config.log.warn("lost the coordinator ({}); waiting for its standby",
                             describe(msg.reason));
    config.log.error("lost the coordinator ({})", describe(msg.reason));
    self->quit(make_error(errc::job_failed, "lost the coordinator"));
  });
  join(self, config);
  return {
      [=](host_atom, const wire& w) { return host(self, config, w); },
      [=](rejoin_atom, uint64_t term) { rejoin(self, config, term); },
      [=](metrics_atom) {
        return metrics_for(self, config.coordinator->address(), config.metrics);
      },
      [=](log_atom, const std::string& level) {
        set_level_from(self, config.coordinator->address(), level, config.log);
      },
      [=](usage_atom) -> uint64_t { return current_process_usage().peak_rss_bytes; },
      [=](stop_atom, const std::string& failure) {
        if (sent_by(self, config.coordinator->address())) {
          config.log.info("the job is over; stopping {} buckets", self->state.hosted);
          config.coordinator->close();
        }
        // The linked supervisor and its buckets end with us; quitting after this reply lets
        // it reach the coordinator.
        return stop_on_request(self, config.coordinator->address(), failure, "server");
      },
      [=](peer_atom, const std::string& host, uint16_t port) -> caf::result<bool> {
        if (!sent_by(self, config.coordinator->address()))
          return make_error(errc::authentication_failed, "only the coordinator names peers");
        auto helper = self->spawn<caf::detached>(connector, config.request_timeout);
        auto promise = self->make_response_promise<bool>();
        self->request(helper, config.request_timeout, host, port)
            .then([=](bool) mutable { promise.deliver(true); },
                  [=](caf::error& err) mutable { promise.deliver(std::move(err)); });
        return promise;
      },
      [=](moved_atom, const std::string& name, const caf::actor& handle) {
        moved(self, config, name, handle);
      },
      [=](fault_atom) {
        crash_on_purpose(self, config.coordinator->address(), config.name, config.log);
      },
  };
}

}  // namespace troupe
