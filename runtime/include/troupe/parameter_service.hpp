// Parameters for an app's own actors: a parameter service and its clients.
//
// parameter_service::start splits the dense tensors into buckets, each a parameter bucket
// actor (the same actor a distributed job places on its servers: it applies each push as it
// arrives with the job's optimizer, stamps its values with a vector clock and enforces
// async/ssp/bsp), under a one_for_one supervisor that restarts a failed bucket with its state;
// or, given an app_node, on server nodes that join it, each bucket replicated along a chain of
// servers as a job's are. A parameter_client, one per pushing actor, pulls the whole flat
// parameter vector and pushes flat gradients; each push carries the clocks its gradient was
// read at, and the buckets answer with its staleness. Every request has the service's timeout;
// a client that finds a bucket gone asks for its successor (the supervisor's restarted one, or
// the backup that took over) and tries once more.
//
// From main() (start, connect, client, stop) and from inside event-based actors (pull, push).
// A client belongs to one actor: its push count is the clock ssp/bsp gate its pulls by. An
// app_node can serve the service to actors in other processes (app_node::serve), which
// reach it with parameter_service::connect.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/expected.hpp>

#include "troupe/log.hpp"
#include "troupe/task.hpp"
#include "troupe/update_rule.hpp"
#include "troupe/values.hpp"
#include "troupe/vector_clock.hpp"

namespace troupe {

class app_node;

struct parameter_service_config {
  std::vector<tensor_spec> tensors;  // dense; the first dimension is split across buckets
  std::vector<float> initial;        // flat, in `tensors` order; empty: all zeros
  optimizer_config optimizer;        // sgd, momentum, adam, adamw (dash: 2-D tensors)
  update_rules rules;                // optimizer kind app: its rule is one of these
  consistency_config consistency;    // async, ssp (bound), bsp
  compensation_config compensation;  // delay compensation of stale gradients
  std::vector<table_spec> tables;    // embedding tables: rows hashed over the buckets
  uint64_t seed = 0;                 // rows start from (seed, table, id)
  float clip = 0;                    // clip each row gradient to this L2 norm (0: off)
  uint32_t buckets = 1;  // at most one per row; more where a bucket would outgrow a message
  uint32_t clients = 1;  // the actors that push: client ids 0 .. clients - 1
  std::chrono::milliseconds timeout{10000};  // each pull or push of one bucket
  std::string name = "parameters";           // the supervisor's name; buckets: bucket-<b>
  logger log{"parameters"};
  // On server nodes (start(sys, node, config)): how many join the app node, the copies of each
  // bucket (a primary and replication - 1 backups, each on its own server: 1 .. servers), and
  // how long start waits for the servers to join and take the buckets. 0 servers: the buckets
  // live in the serving process.
  uint32_t servers = 0;
  uint32_t replication = 1;
  std::chrono::milliseconds join_timeout{60000};
};

// A pull: the flat parameter values, per bucket the clock they were read at, and the embedding
// rows asked for (per table: ids sorted and unique, their values; grads sized for a push).
struct parameter_snapshot {
  std::vector<float> values;
  std::vector<vector_clock> clocks;
  sparse_rows_view rows;
};

// What the buckets said of a push: the largest staleness any of them counted (updates others
// applied since the snapshot the gradient was computed from).
struct push_outcome {
  uint64_t staleness = 0;
};

class parameter_client {
 public:
  uint32_t id() const;
  size_t size() const;  // values in a snapshot (and in a gradient)
  uint32_t buckets() const;
  uint64_t pushes() const;
  std::chrono::milliseconds timeout() const;  // the bound of each request to one bucket
  // How this client's requests reach bucket b: "in-process", "lane" or "caf" (empty before
  // its first request).
  std::string route(uint32_t b) const;

  // Pulls every bucket at once; `done` gets the snapshot, or the first error (errc::timeout
  // when a bucket did not answer in time). ssp/bsp hold the pull until this client's clock is
  // within the bound.
  void pull(caf::event_based_actor* self,
            std::function<void(caf::expected<parameter_snapshot>)> done) const;

  // The same, with the embedding rows `ids` names (one list per table in the config's order,
  // any order, repeats allowed; a row is created on first read). errc::shape_mismatch for
  // more lists than tables.
  void pull(caf::event_based_actor* self, std::vector<std::vector<uint64_t>> ids,
            std::function<void(caf::expected<parameter_snapshot>)> done) const;

  // Pushes a flat gradient computed from `read`. A gradient of another size
  // (errc::shape_mismatch) or with NaN/Inf (errc::non_finite) is refused here, and nothing is
  // sent. `done` gets the outcome, or the first bucket's error; buckets that accepted keep
  // the update.
  void push(caf::event_based_actor* self, std::span<const float> grad,
            const parameter_snapshot& read,
            std::function<void(caf::expected<push_outcome>)> done) const;

  // The same, with gradients for the rows `read` pulled: read.rows.ids, and `row_grads` laid
  // out as read.rows.grads (one list per table, ids.size() x row_dim values each).
  void push(caf::event_based_actor* self, std::span<const float> grad,
            const parameter_snapshot& read, const std::vector<std::vector<float>>& row_grads,
            std::function<void(caf::expected<push_outcome>)> done) const;

  // The same, named by the batches the gradient was computed from (epoch, first batch,
  // count > 0; errc::malformed_message otherwise): a bucket that has counted any of them, from
  // any client, acknowledges the push without applying it (the report's duplicate_pushes).
  // So a batch that another actor computes again after a failure is applied at most once per
  // bucket. `row_grads` may be empty.
  void push(caf::event_based_actor* self, std::span<const float> grad,
            const parameter_snapshot& read, const std::vector<std::vector<float>>& row_grads,
            batch_range batches, std::function<void(caf::expected<push_outcome>)> done) const;

  struct state;  // the service's layout and buckets, this client's id and clock

 private:
  void send_push(caf::event_based_actor* self, std::span<const float> grad,
                 const parameter_snapshot& read, const std::vector<std::vector<float>>& row_grads,
                 std::optional<batch_range> batches,
                 std::function<void(caf::expected<push_outcome>)> done) const;

  friend class parameter_service;
  explicit parameter_client(std::shared_ptr<state> s) : state_(std::move(s)) {}
  std::shared_ptr<state> state_;
};

// How a connecting process reaches the serving node's data lane: the node's host, and the
// cluster secret. Empty secret: no lane (requests go over CAF).
struct lane_access {
  std::string host;
  std::string secret;
};

class parameter_service {
 public:
  // errc::bad_configuration or shape_mismatch for a configuration that cannot be served
  // (no tensors, initial values of another size, more buckets than rows, no clients).
  static caf::expected<parameter_service> start(caf::actor_system& sys,
                                                parameter_service_config config);

  // The same service with its buckets on config.servers server nodes: any Troupe app binary
  // run with `--role server --coordinator HOST:PORT` of `node` and its secret. Each bucket
  // has config.replication copies, each on its own server, chained as a job's are: when a
  // server is lost, the first live backup of each of its primaries takes over, the clients
  // find it through the service's coordinator (their requests in flight go again, applied
  // once), and the chains grow back onto a server that joins later (one that restarts under
  // its name, too). With one copy, a lost server ends the service (its clients' requests then
  // fail). Blocks until the servers joined and hold the buckets: errc::timeout after
  // config.join_timeout (the servers that joined are stopped), errc::bad_configuration when
  // the node's servers already hold another service, or replication is not in 1 .. servers.
  // The clients reach the servers over their data lanes (not under TLS). One service on
  // servers per node; `node` must outlive it. config.servers == 0: start(sys, config).
  static caf::expected<parameter_service> start(caf::actor_system& sys, const app_node& node,
                                                parameter_service_config config);

  // A service that an app_node in another process serves (app_node::serve): `node` is the
  // handle join_cluster gave for that node (role worker, the cluster secret). Its clients
  // pull and push over the network; the serving node owns it (stop() here does nothing).
  // errc::bad_configuration when the node serves no service of that name, errc::timeout when
  // it does not answer within `timeout`. With `lane` (the node's host and the secret), pulls
  // and pushes go over the node's data lane where it offers one (not under TLS), as a job's
  // workers' do. From main(), not from inside an actor.
  static caf::expected<parameter_service> connect(caf::actor_system& sys, const caf::actor& node,
                                                  const std::string& name,
                                                  std::chrono::milliseconds timeout,
                                                  const lane_access& lane = {});

  // The client of id `id` (< clients): errc::bad_configuration otherwise. Clients of one id
  // must be one actor, in whichever process: the id's push count is its clock.
  caf::expected<parameter_client> client(uint32_t id) const;

  // The dense tensors it holds, in the order of a snapshot's values.
  const std::vector<tensor_spec>& tensors() const;

  // The supervisor of the buckets (console, supervision trees, child_of); none for a service
  // on servers (each server node supervises its own).
  caf::actor supervisor() const;

  // Stops the supervisor and its buckets, or the servers' (a service this process started);
  // clients then fail their requests.
  void stop() const;

  struct shared;

 private:
  friend class app_node;  // serves it to other processes
  explicit parameter_service(std::shared_ptr<shared> s) : shared_(std::move(s)) {}
  std::shared_ptr<shared> shared_;
};

}  // namespace troupe
