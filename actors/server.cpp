#include "actors/server.hpp"

#include <unistd.h>

#include "actors/guards.hpp"
#include "actors/job_outcome.hpp"
#include "actors/parameter_bucket.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// More than any job places on one server; a bound on what a confused coordinator can spawn.
constexpr size_t max_buckets_per_server = 1 << 14;

// Joins the coordinator; a refusal or a lost coordinator ends this server with an error.
void join(server_actor::stateful_pointer<server_state> self, const server_config& config) {
  const join_request request{role::server, config.name, static_cast<uint32_t>(::getpid()),
                             config.data};
  self->request(config.coordinator, config.request_timeout, join_atom_v, encode(request),
                caf::actor_cast<server_actor>(self))
      .then(
          [=](const wire& w) {
            if (auto reply = decode<join_reply>(w))
              config.log.info("joined as server {} of {}", reply->rank, reply->world_servers);
            else
              self->quit(reply.error());
          },
          [=](caf::error& err) {
            config.log.error("the coordinator refused us: {}", describe(err));
            self->quit(std::move(err));
          });
}

}  // namespace

server_actor::behavior_type server(server_actor::stateful_pointer<server_state> self,
                                   server_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  self->monitor(config.coordinator);
  self->set_down_handler([=](caf::down_msg& msg) {
    if (msg.source != config.coordinator.address() || self->state.stopping) return;
    config.log.error("lost the coordinator ({})", describe(msg.reason));
    self->quit(make_error(errc::job_failed, "lost the coordinator"));
  });
  join(self, config);
  return {
      [=](host_atom, const wire& w) -> caf::result<bucket_actor> {
        if (!sent_by(self, config.coordinator.address()))
          return make_error(errc::authentication_failed, "only the coordinator places buckets");
        if (self->state.buckets.size() >= max_buckets_per_server)
          return make_error(errc::message_too_large, "this server hosts enough buckets");
        auto spec = decode<bucket_spec>(w);
        if (!spec) return std::move(spec.error());
        const uint32_t id = spec->bucket;
        const bucket_actor_config bucket_config{self->address(), config.coordinator.address(),
                                                config.log.named("bucket-" + std::to_string(id))};
        auto bucket = self->spawn<caf::linked>(parameter_bucket, std::move(*spec), bucket_config);
        self->state.buckets.push_back(bucket);
        config.log.debug("hosting bucket {}", id);
        return bucket;
      },
      [=](stop_atom, const std::string& failure) -> caf::result<bool> {
        if (!sent_by(self, config.coordinator.address()))
          return make_error(errc::authentication_failed, "only the coordinator stops a server");
        self->state.stopping = true;
        config.log.info("the job is over; stopping {} buckets", self->state.buckets.size());
        // Linked buckets end with us; quitting after this reply lets it reach the coordinator.
        self->quit(job_outcome(failure));
        return true;
      },
  };
}

}  // namespace troupe
