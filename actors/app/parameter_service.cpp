// The in-process parameter service of troupe/parameter_service.hpp: parameter buckets under a
// supervisor, and the clients that fan a pull or push out to every bucket and gather the
// replies.
#include "troupe/parameter_service.hpp"

#include <fmt/format.h>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <cmath>

#include "actors/app/parameter_service_parts.hpp"
#include "actors/bucket/parameter_bucket.hpp"
#include "actors/supervision/supervisors/supervisor.hpp"
#include "actors/transport/bucket_client.hpp"
#include "actors/transport/server_links.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"
#include "troupe/supervision.hpp"

namespace troupe {

struct parameter_client::state {
  std::shared_ptr<parameter_service::shared> service;
  uint32_t id = 0;
  uint64_t pushes = 0;
  std::vector<bucket_actor> buckets;  // this client's view: replaced when one is found gone
  // The client of the buckets for the actor that calls this one (made at its first call).
  caf::scheduled_actor* actor = nullptr;
  std::shared_ptr<bucket_client> client;
};

namespace {

const std::string bucket_prefix = "bucket-";

// One reply per bucket, then `finish` once: with the gathered value, or the first error.
template <class T>
struct fan_in {
  size_t waiting = 0;
  bool failed = false;
  T value;
  std::function<void(caf::expected<T>)> finish;

  void fail(caf::error err) {
    if (failed) return;
    failed = true;
    finish(std::move(err));
  }
  void arrived() {
    if (!failed && --waiting == 0) finish(std::move(value));
  }
};

// The supervisor's own end (it stopped, or was killed).
bool supervisor_gone(const caf::error& err) {
  return err == caf::sec::request_receiver_down || err == caf::exit_reason::user_shutdown ||
         err.category() == caf::atom("exit");
}

caf::error timed_out(caf::error err, uint32_t bucket) {
  if (err == caf::sec::request_timeout)
    return make_error(errc::timeout, "bucket " + std::to_string(bucket) + " did not answer");
  return err;
}

// Answers its one request after `pause`: a wait for an actor that must not block (nor change
// its behaviour, which is the app's).
caf::behavior pause_actor(caf::event_based_actor* self, std::chrono::milliseconds pause) {
  return {[=](bool) {
    auto promise = self->make_response_promise();
    self->become(caf::after(pause) >> [=]() mutable {
      promise.deliver(true);
      self->quit();
    });
    return promise;
  }};
}

// Asks the supervisor for bucket b's actor until it names another than `gone` (the restart
// waits out a backoff), every 20 ms until `deadline`; then calls found.
void find_restarted(caf::event_based_actor* self, std::shared_ptr<parameter_client::state> st,
                    uint32_t b, caf::actor_addr gone,
                    std::chrono::steady_clock::time_point deadline,
                    std::function<void(caf::expected<caf::actor>)> found) {
  const auto timeout = st->service->timeout;
  child_of(self, st->service->supervisor, bucket_prefix + std::to_string(b), timeout,
           [=](caf::expected<caf::actor> child) {
             if (child && child->address() != gone) return found(std::move(child));
             if (!child && supervisor_gone(child.error()))
               return found(make_error(errc::job_failed, "the parameter service has stopped"));
             if (std::chrono::steady_clock::now() >= deadline)
               return found(make_error(errc::job_failed,
                                       "bucket " + std::to_string(b) + " did not come back"));
             auto again = [=] { find_restarted(self, st, b, gone, deadline, found); };
             self->request(self->spawn(pause_actor, std::chrono::milliseconds(20)), timeout, true)
                 .then([again](bool) { again(); }, [again](caf::error&) { again(); });
           });
}

// Asks the coordinator of a service on servers for bucket b's successor of `failed` (it holds
// the answer while a backup is being promoted).
void ask_coordinator(caf::event_based_actor* self, const parameter_service::shared& service,
                     size_t b, const bucket_actor& failed,
                     std::function<void(caf::expected<bucket_actor>)> found) {
  const auto bucket = static_cast<uint32_t>(b);
  self->request(caf::actor_cast<coordinator_actor>(service.coordinator), service.timeout,
                which_atom_v, bucket, failed)
      .then([found](const bucket_actor& handle) { found(handle); },
            [found, bucket](caf::error& err) {
              if (err == caf::sec::request_receiver_down)
                err = make_error(errc::job_failed, "the parameter service has stopped");
              found(timed_out(std::move(err), bucket));
            });
}

// The client of the buckets for `self`: one per calling actor. A bucket that went is found
// again once: through the coordinator of a service on servers (which names the backup that
// took over), or the supervisor of one in-process (which restarts it; one that did not answer
// in time is not looked for there: errc::timeout). The app's own actor decides what next.
bucket_client& client_for(caf::event_based_actor* self,
                          std::shared_ptr<parameter_client::state> st) {
  if (st->client && st->actor == self) return *st->client;
  bucket_client_config c;
  c.buckets = st->buckets;
  c.lanes = st->service->lanes;
  c.timeout = st->service->timeout;
  c.max_attempts = 2;
  c.log = st->service->log;
  // (Weakly: the client is the state's, and a request's handlers must not keep the state.)
  c.find_again = [self, weak = std::weak_ptr<parameter_client::state>(st)](
                     size_t b, const bucket_actor& failed, const caf::error& why,
                     std::function<void(caf::expected<bucket_actor>)> found) {
    auto st = weak.lock();
    if (!st) return found(make_error(errc::job_failed, "the parameter client is gone"));
    if (st->service->coordinator)
      return ask_coordinator(self, *st->service, b, failed,
                             [st, b, found](caf::expected<bucket_actor> successor) {
                               if (successor) st->buckets[b] = *successor;
                               found(std::move(successor));
                             });
    if (why == caf::sec::request_timeout) return found(timed_out(why, static_cast<uint32_t>(b)));
    find_restarted(self, st, static_cast<uint32_t>(b), failed.address(),
                   std::chrono::steady_clock::now() + st->service->timeout,
                   [st, b, found](caf::expected<caf::actor> child) {
                     if (!child) return found(std::move(child.error()));
                     st->buckets[b] = caf::actor_cast<bucket_actor>(*child);
                     found(st->buckets[b]);
                   });
  };
  st->actor = self;
  st->client = bucket_client::make(self, std::move(c));
  return *st->client;
}

// Each bucket's spec, as a remote server would receive it: through the codec and its checks.
caf::expected<std::vector<bucket_spec>> bucket_specs(const parameter_service_config& config,
                                                     const flat_layout& layout,
                                                     const placement& plan) {
  std::vector<float> initial = config.initial;
  if (initial.empty()) initial.assign(layout.total, 0.0f);
  if (initial.size() != layout.total)
    return make_error(errc::shape_mismatch, "initial values of another size than the tensors");
  std::vector<bucket_spec> specs;
  for (const auto& b : plan.buckets) {
    bucket_spec spec{b.bucket,           config.clients,
                     config.optimizer,   gather(layout, b, initial),
                     config.consistency, config.compensation};
    for (const auto& t : config.tables)
      spec.tables.push_back(config_of(t));
    spec.bucket_count = static_cast<uint32_t>(plan.buckets.size());
    spec.seed = config.seed;
    spec.clip = config.clip;
    auto checked = decode<bucket_spec>(encode(spec));
    if (!checked) return std::move(checked.error());
    specs.push_back(std::move(*checked));
  }
  return specs;
}

// A bucket around `store`, restarted with it. It takes orders (retire, admit, save) only from
// a controller, and here nobody is one.
child_spec bucket_child(std::shared_ptr<bucket_store> store, const parameter_service_config& c,
                        std::shared_ptr<bucket_enrollment> enrollment) {
  const auto timeout = std::chrono::ceil<std::chrono::seconds>(c.timeout);
  const std::string name = bucket_prefix + std::to_string(store->id());
  auto log = c.log.named(c.name + "/" + name);
  child_spec spec{
      name,
      [store, timeout, log, enrollment](caf::local_actor* parent, caf::actor_addr supervisor) {
        const bucket_actor_config config{supervisor, fixed_link(coordinator_actor{}), timeout, log};
        auto bucket = parent->spawn(parameter_bucket, store, config);
        enrollment->started(store->id(), bucket);
        return caf::actor_cast<caf::actor>(bucket);
      }};
  spec.kind = "bucket";
  return spec;
}

}  // namespace

caf::expected<service_layout> lay_out_service(const parameter_service_config& config,
                                              uint32_t servers) {
  if (config.tensors.empty() || config.clients == 0 || config.buckets == 0)
    return make_error(errc::bad_configuration,
                      "a parameter service needs tensors, a bucket and a client");
  for (const auto& t : config.tables)
    if (auto err = check_table(t)) return err;
  auto sh = std::make_shared<parameter_service::shared>(
      parameter_service::shared{flat_layout{config.tensors},
                                {},
                                config.clients,
                                config.timeout,
                                {},
                                {},
                                true,
                                config.tables});
  sh->log = config.log;
  const uint64_t pieces = most_parts(sh->layout);
  if (config.buckets > pieces)
    return make_error(errc::bad_configuration, "more buckets than rows to split");
  // Never so few that a bucket outgrows one message.
  const uint32_t buckets = std::max<uint32_t>(
      config.buckets, std::min<uint64_t>(fewest_parts(sh->layout.total), pieces));
  sh->plan = plan_buckets(sh->layout, buckets, servers);
  if (auto err = check_rule(config.optimizer, config.rules)) return err;
  auto specs = bucket_specs(config, sh->layout, sh->plan);
  if (!specs) return std::move(specs.error());
  return service_layout{std::move(sh), std::move(*specs)};
}

caf::expected<parameter_service> parameter_service::start(caf::actor_system& sys,
                                                          parameter_service_config config) {
  if (config.servers > 0)
    return make_error(errc::bad_configuration,
                      "a service on servers starts with the app node they join: "
                      "parameter_service::start(sys, node, config)");
  auto laid_out = lay_out_service(config, 1);
  if (!laid_out) return std::move(laid_out.error());
  auto sh = std::move(laid_out->shared);
  auto& specs = laid_out->specs;
  std::vector<child_spec> children;
  for (auto& spec : specs)
    children.push_back(bucket_child(std::make_shared<bucket_store>(std::move(spec), config.rules),
                                    config, sh->enrollment));
  supervisor_config sup;
  sup.name = config.name;
  sup.log = config.log.named(config.name);
  sh->supervisor = spawn_supervisor(sys, sup, children);
  caf::scoped_actor self{sys};
  for (uint32_t b = 0; b < sh->plan.buckets.size(); ++b) {
    caf::error failed;
    self->request(caf::actor_cast<supervisor_actor>(sh->supervisor), config.timeout, which_atom_v,
                  bucket_prefix + std::to_string(b))
        .receive(
            [&](const caf::actor& bucket) {
              sh->buckets.push_back(caf::actor_cast<bucket_actor>(bucket));
            },
            [&](caf::error& err) { failed = std::move(err); });
    if (failed) {
      parameter_service{sh}.stop();
      return failed;
    }
  }
  return parameter_service{std::move(sh)};
}

void bucket_enrollment::started(uint32_t b, const bucket_actor& bucket) {
  std::lock_guard<std::mutex> guard{lock};
  if (current.size() <= b) current.resize(b + 1);
  current[b] = bucket;
  for (auto& lane : lanes) lane->enroll(bucket);
}

void bucket_enrollment::add_lane(std::shared_ptr<lane_listener> lane) {
  std::lock_guard<std::mutex> guard{lock};
  for (const auto& bucket : current)
    if (bucket) lane->enroll(bucket);
  lanes.push_back(std::move(lane));
}

service_directory directory_of(const parameter_service::shared& service) {
  service_directory out;
  for (const auto& t : service.layout.specs) out.tensors.push_back(named_shape{t.name, t.shape});
  out.plan = service.plan;
  out.clients = service.clients;
  out.timeout_ms = static_cast<uint64_t>(service.timeout.count());
  for (const auto& t : service.tables)
    out.tables.push_back(config_of(t));
  return out;
}

caf::expected<parameter_service> parameter_service::connect(caf::actor_system& sys,
                                                            const caf::actor& node,
                                                            const std::string& name,
                                                            std::chrono::milliseconds timeout,
                                                            const lane_access& lane) {
  caf::scoped_actor self{sys};
  caf::expected<parameter_service> out = make_error(errc::timeout, "no answer from the node");
  self->request(caf::actor_cast<coordinator_actor>(node), timeout, service_atom_v, name)
      .receive(
          [&](const wire& w, const caf::actor& supervisor, std::vector<bucket_actor> buckets) {
            auto dir = decode<service_directory>(w);
            if (!dir) {
              out = std::move(dir.error());
              return;
            }
            std::vector<tensor_spec> tensors;
            for (auto& t : dir->tensors) tensors.push_back(tensor_spec{t.name, t.shape});
            std::vector<table_spec> tables;
            for (auto& t : dir->tables)
              tables.push_back(spec_of(t));
            auto sh = std::make_shared<shared>(
                shared{flat_layout{std::move(tensors)}, std::move(dir->plan), dir->clients,
                       std::chrono::milliseconds(dir->timeout_ms), supervisor, std::move(buckets),
                       false, std::move(tables)});
            if (!dir->servers.empty()) {  // on servers: the handle is their coordinator
              sh->coordinator = std::exchange(sh->supervisor, caf::actor{});
              auto servers = parse_server_list(dir->servers);
              if (!servers) {
                out = std::move(servers.error());
                return;
              }
              sh->servers = std::move(*servers);
            }
            if (sh->buckets.size() != sh->plan.buckets.size() || !supervisor) {
              out = make_error(errc::malformed_message,
                               "service '" + name + "': a handle for every bucket");
              return;
            }
            for (const auto& b : sh->plan.buckets)
              for (const auto& s : b.slices)
                if (!locate(sh->layout, s)) {
                  out = make_error(errc::malformed_message,
                                   "service '" + name + "': a plan that does not fit its tensors");
                  return;
                }
            if (!sh->servers.empty())
              connect_to_servers(sys, sh->servers, lane.secret, timeout, sh->log, sh->lanes,
                                 "the service's pulls and pushes");
            else if (dir->lane != 0 && !lane.secret.empty())  // the serving node's own lane
              sh->lanes.open(lane.host, dir->lane, lane.secret, timeout, sh->log,
                             "the service's requests");
            out = parameter_service{std::move(sh)};
          },
          [&](caf::error& err) {
            if (err == caf::sec::request_timeout || err == caf::sec::request_receiver_down)
              out = make_error(errc::timeout, "the node did not answer for service '" + name + "'");
            else
              out = std::move(err);
          });
  return out;
}

caf::expected<parameter_client> parameter_service::client(uint32_t id) const {
  if (id >= shared_->clients)
    return make_error(errc::bad_configuration,
                      fmt::format("client {} of a service for {}", id, shared_->clients));
  auto st = std::make_shared<parameter_client::state>();
  st->service = shared_;
  st->id = id;
  st->buckets = shared_->coordinator ? buckets_now(*shared_) : shared_->buckets;
  return parameter_client{std::move(st)};
}

const std::vector<tensor_spec>& parameter_service::tensors() const {
  return shared_->layout.specs;
}

caf::actor parameter_service::supervisor() const {
  return shared_->supervisor;
}

void parameter_service::stop() const {
  if (!shared_->owned) return;  // connected to: the serving node stops it
  if (shared_->coordinator) return stop_service_on_servers(*shared_);
  // A supervisor takes exit messages only from its parent, which this one has not; kill is
  // the one reason nobody can refuse, and the supervisor ends its buckets as it goes.
  caf::anon_send_exit(shared_->supervisor, caf::exit_reason::kill);
}

uint32_t parameter_client::id() const {
  return state_->id;
}

size_t parameter_client::size() const {
  return state_->service->layout.total;
}

uint32_t parameter_client::buckets() const {
  return static_cast<uint32_t>(state_->service->plan.buckets.size());
}

uint64_t parameter_client::pushes() const {
  return state_->pushes;
}

std::string parameter_client::route(uint32_t b) const {
  if (!state_->client || b >= state_->client->size()) return {};
  return state_->client->channel_name(b);
}

std::chrono::milliseconds parameter_client::timeout() const {
  return state_->service->timeout;
}

void parameter_client::pull(caf::event_based_actor* self,
                            std::function<void(caf::expected<parameter_snapshot>)> done) const {
  pull(self, {}, std::move(done));
}

void parameter_client::pull(caf::event_based_actor* self, std::vector<std::vector<uint64_t>> ids,
                            std::function<void(caf::expected<parameter_snapshot>)> done) const {
  auto st = state_;
  const auto& plan = st->service->plan;
  const auto& tables = st->service->tables;
  if (ids.size() > tables.size())
    return done(make_error(
        errc::shape_mismatch,
        fmt::format("rows of {} tables asked of a service with {}", ids.size(), tables.size())));
  auto gathered = std::make_shared<fan_in<parameter_snapshot>>();
  const auto buckets = static_cast<uint32_t>(plan.buckets.size());
  gathered->waiting = buckets;
  gathered->value.values.assign(size(), 0.0f);
  gathered->value.clocks.resize(buckets);
  gathered->value.rows.ids = std::move(ids);
  size_rows(tables, gathered->value.rows);
  gathered->finish = std::move(done);
  for (uint32_t b = 0; b < buckets; ++b) {
    const pull_request request{b, st->id, st->pushes,
                               row_requests(tables, gathered->value.rows, b, buckets)};
    client_for(self, st).pull(
        b, request,
        [service = st->service, gathered, b](const dense_tensor& t) {
          return place_of(service->layout, service->plan.buckets[b], t, gathered->value.values);
        },
        [service = st->service, gathered, b](pull_reply& reply) {
          if (auto err = fill_rows(service->tables, reply.rows, gathered->value.rows))
            return gathered->fail(std::move(err));
          gathered->value.clocks[b] = std::move(reply.clock);
          gathered->arrived();
        },
        [gathered, b](bucket_failure f) { gathered->fail(timed_out(std::move(f.error), b)); });
  }
}

void parameter_client::push(caf::event_based_actor* self, std::span<const float> grad,
                            const parameter_snapshot& read,
                            std::function<void(caf::expected<push_outcome>)> done) const {
  push(self, grad, read, {}, std::move(done));
}

namespace {

// Whether `row_grads` fits the rows `read` pulled from a service with `tables`: none at all,
// or a list per table of ids.size() x row_dim finite values.
caf::error check_row_grads(const std::vector<table_spec>& tables, const sparse_rows_view& read,
                           const std::vector<std::vector<float>>& row_grads) {
  if (row_grads.empty()) return {};
  if (row_grads.size() != tables.size() || read.ids.size() != tables.size())
    return make_error(errc::shape_mismatch, "row gradients: one list per table of the service");
  for (size_t t = 0; t < tables.size(); ++t) {
    if (row_grads[t].size() != read.ids[t].size() * tables[t].row_dim)
      return make_error(
          errc::shape_mismatch,
          fmt::format("row gradients of {}: {} values for {} rows of {}", tables[t].name,
                      row_grads[t].size(), read.ids[t].size(), tables[t].row_dim));
    if (!kernels::all_finite(row_grads[t]))
      return make_error(errc::non_finite, "row gradients with NaN or Inf; nothing was pushed");
  }
  return {};
}

}  // namespace

void parameter_client::push(caf::event_based_actor* self, std::span<const float> grad,
                            const parameter_snapshot& read,
                            const std::vector<std::vector<float>>& row_grads,
                            std::function<void(caf::expected<push_outcome>)> done) const {
  send_push(self, grad, read, row_grads, std::nullopt, std::move(done));
}

void parameter_client::push(caf::event_based_actor* self, std::span<const float> grad,
                            const parameter_snapshot& read,
                            const std::vector<std::vector<float>>& row_grads, batch_range batches,
                            std::function<void(caf::expected<push_outcome>)> done) const {
  if (batches.count == 0)
    return done(make_error(errc::malformed_message, "a push named by no batches"));
  send_push(self, grad, read, row_grads, batches, std::move(done));
}

void parameter_client::send_push(caf::event_based_actor* self, std::span<const float> grad,
                                 const parameter_snapshot& read,
                                 const std::vector<std::vector<float>>& row_grads,
                                 std::optional<batch_range> batches,
                                 std::function<void(caf::expected<push_outcome>)> done) const {
  auto st = state_;
  const auto& service = *st->service;
  const auto buckets = static_cast<uint32_t>(service.plan.buckets.size());
  if (grad.size() != size() || read.clocks.size() != buckets)
    return done(make_error(errc::shape_mismatch,
                           fmt::format("a gradient of {} values for a snapshot of {} buckets; "
                                       "this service has {} values in {} buckets",
                                       grad.size(), read.clocks.size(), size(), buckets)));
  if (!kernels::all_finite(grad))
    return done(make_error(errc::non_finite, "a gradient with NaN or Inf; nothing was pushed"));
  if (auto err = check_row_grads(service.tables, read.rows, row_grads)) return done(err);
  const sparse_rows_view rows{read.rows.ids, {}, row_grads};
  const uint64_t clock = st->pushes++;
  auto gathered = std::make_shared<fan_in<push_outcome>>();
  gathered->waiting = buckets;
  gathered->finish = std::move(done);
  for (uint32_t b = 0; b < buckets; ++b) {
    auto request = std::make_shared<push_request>(push_request{
        b, st->id, clock, read.clocks[b], gather(service.layout, service.plan.buckets[b], grad)});
    if (!row_grads.empty()) request->sparse = row_gradients(service.tables, rows, b, buckets);
    request->batches = batches;
    client_for(self, st).push(
        b, std::move(request), std::nullopt,
        [gathered](const push_ack& ack) {
          gathered->value.staleness = std::max(gathered->value.staleness, ack.staleness);
          gathered->arrived();
        },
        [gathered, b](bucket_failure f) { gathered->fail(timed_out(std::move(f.error), b)); });
  }
}

}  // namespace troupe
