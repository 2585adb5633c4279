// Every connection a Troupe node opens or accepts goes through these: over mutual TLS when the
// actor system was configured with --tls-dir (configure_actor_system loads caf_openssl), over
// plain TCP otherwise, so that no port is ever opened in clear beside a TLS one. Unlike CAF's
// own calls, every wait has a bound (a peer that accepts TCP and never finishes a handshake
// costs `timeout`, not forever). Blocking: call from main, a test, or a detached actor.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/node_id.hpp>

#include <chrono>
#include <set>
#include <string>

namespace troupe::net {

// True when this actor system speaks TLS to every peer.
bool uses_tls(const caf::actor_system& sys);

// Publishes `whom` at host:port (0: any free port) and returns the bound port.
caf::expected<uint16_t> publish(caf::actor_system& sys, const caf::strong_actor_ptr& whom,
                                std::set<std::string> interface, uint16_t port,
                                const std::string& host);

template <class Handle>
caf::expected<uint16_t> publish(const Handle& whom, uint16_t port, const std::string& host) {
  auto& sys = whom.home_system();
  return publish(sys, caf::actor_cast<caf::strong_actor_ptr>(whom), sys.message_types(whom), port,
                 host);
}

void unpublish(caf::actor_system& sys, const caf::actor_addr& whom, uint16_t port);

// Opens host:port for CAF peers (no actor published: they reach actors whose handles they got
// otherwise); returns the bound port.
caf::expected<uint16_t> open(caf::actor_system& sys, uint16_t port, const std::string& host);

// Connects this node to the node at host:port (handshakes included), so that messages to its
// actors travel directly instead of through the node that introduced them.
caf::expected<caf::node_id> connect(caf::actor_system& sys, const std::string& host, uint16_t port,
                                    std::chrono::milliseconds timeout);

// The actor published at host:port, checked against `interface`.
caf::expected<caf::strong_actor_ptr> remote_actor(caf::actor_system& sys,
                                                  const std::set<std::string>& interface,
                                                  const std::string& host, uint16_t port,
                                                  std::chrono::milliseconds timeout);

template <class Handle = caf::actor>
caf::expected<Handle> remote_actor(caf::actor_system& sys, const std::string& host, uint16_t port,
                                   std::chrono::milliseconds timeout) {
  caf::detail::type_list<Handle> tk;
  auto found = remote_actor(sys, sys.message_types(tk), host, port, timeout);
  if (!found) return std::move(found.error());
  return caf::actor_cast<Handle>(std::move(*found));
}

}  // namespace troupe::net
