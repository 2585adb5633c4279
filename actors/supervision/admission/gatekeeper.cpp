#include "actors/supervision/admission/gatekeeper.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/detail/auth.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

uint64_t random_session() {
  const auto bytes = auth::random_nonce(8);
  uint64_t id = 0;
  for (uint8_t b : bytes) id = (id << 8) | b;
  return id;
}

// Drops expired challenges, then the ones closest to expiry until there is room for one more.
void drop_expired(gatekeeper_state& st, size_t max_pending) {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(st.pending, [&](const auto& kv) { return kv.second.expires < now; });
  while (!st.pending.empty() && st.pending.size() >= max_pending) {
    auto oldest = std::min_element(
        st.pending.begin(), st.pending.end(),
        [](const auto& a, const auto& b) { return a.second.expires < b.second.expires; });
    st.pending.erase(oldest);
  }
}

}  // namespace

gatekeeper_actor::behavior_type gatekeeper(
    gatekeeper_actor::stateful_pointer<gatekeeper_state> self, gatekeeper_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  return {
      [=](hello_atom, const wire& w) -> caf::result<wire> {
        auto request = decode<hello>(w);
        if (!request) return std::move(request.error());
        if (request->node_nonce.size() != auth::nonce_bytes)
          return make_error(errc::authentication_failed, "bad nonce");
        if (request->schema_version != wire_schema_version) {
          config.log.warn("refused {} '{}': it speaks wire schema version {}, we speak {}",
                          to_string(request->sender), request->name, request->schema_version,
                          wire_schema_version);
          return make_error(errc::bad_configuration,
                            fmt::format("the coordinator speaks wire schema version {}, this node "
                                        "speaks {}: run the same Troupe version on both",
                                        wire_schema_version, request->schema_version));
        }
        auto& st = self->state;
        drop_expired(st, config.max_pending);
        const uint64_t session = random_session();
        auto nonce = auth::random_nonce();
        if (nonce.empty()) return make_error(errc::authentication_failed, "no random bytes");
        challenge reply{session, nonce,
                        auth::gatekeeper_proof(config.secret, request->node_nonce, nonce)};
        st.pending[session] =
            pending_challenge{std::move(*request), std::move(nonce),
                              std::chrono::steady_clock::now() + config.challenge_ttl};
        return encode(reply);
      },
      [=](prove_atom, const wire& w) -> caf::result<coordinator_actor> {
        auto answer = decode<proof>(w);
        if (!answer) return std::move(answer.error());
        auto& st = self->state;
        auto it = st.pending.find(answer->session);
        if (it == st.pending.end() || it->second.expires < std::chrono::steady_clock::now())
          return make_error(errc::authentication_failed, "unknown or expired session");
        const pending_challenge challenge = std::move(it->second);
        st.pending.erase(it);  // one proof per challenge: replays find nothing
        const auto expected =
            auth::node_proof(config.secret, challenge.nonce, challenge.request.node_nonce,
                             challenge.request.sender, challenge.request.name);
        if (!auth::proofs_match(expected, answer->node_proof)) {
          ++st.refused;
          config.log.warn("refused {} '{}': it does not know the cluster secret",
                          to_string(challenge.request.sender), challenge.request.name);
          return make_error(errc::authentication_failed,
                            "the coordinator refused us: wrong cluster secret");
        }
        config.log.debug("admitted {} '{}'", to_string(challenge.request.sender),
                         challenge.request.name);
        if (challenge.request.sender == role::server && !config.no_servers.empty())
          return make_error(errc::not_needed, config.no_servers);
        if (challenge.request.sender == role::server && config.servers_join) {
          if (auto servers = config.servers_join()) return servers;
          return make_error(errc::not_ready, "no parameter service waits for servers here yet");
        }
        return config.coordinator;
      },
  };
}

}  // namespace troupe
