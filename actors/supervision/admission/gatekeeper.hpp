// gatekeeper: the only actor a coordinator publishes. It answers a hello with a challenge
// (proving the coordinator knows the secret) and hands out the coordinator only for a valid
// proof from the node; see runtime/include/troupe/auth.hpp. Pending challenges are bounded in
// number and expire, so a flood of hellos cannot grow its memory without bound.
#pragma once

#include <chrono>
#include <functional>
#include <map>

#include <caf/typed_event_based_actor.hpp>

#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

struct gatekeeper_config {
  std::string secret;
  coordinator_actor coordinator;
  caf::actor_addr supervisor;
  logger log;
  size_t max_pending = 256;
  std::chrono::seconds challenge_ttl{30};
  // The coordinator servers get instead, asked at each admission (none: `coordinator`):
  // --mode hybrid's tables coordinator; an app node's, the coordinator of the parameter
  // service it places on servers (parameter_service::start with servers), and while it has
  // none (a null answer) a server is told errc::not_ready and tries again.
  std::function<coordinator_actor()> servers_join;
  // A job with no place for servers (--mode dp): a server is told errc::not_needed with this.
  std::string no_servers;
};

struct pending_challenge {
  hello request;
  std::vector<uint8_t> nonce;
  std::chrono::steady_clock::time_point expires;
};

struct gatekeeper_state {
  static inline const char* name = "troupe.gatekeeper";
  std::map<uint64_t, pending_challenge> pending;
  uint64_t refused = 0;
};

gatekeeper_actor::behavior_type gatekeeper(
    gatekeeper_actor::stateful_pointer<gatekeeper_state> self, gatekeeper_config config);

}  // namespace troupe
