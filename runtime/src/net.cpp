#include "troupe/net.hpp"

#include <fmt/format.h>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/scoped_actor.hpp>

#include "troupe/error.hpp"

namespace troupe::net {

namespace {

caf::io::middleman_actor manager_of(caf::actor_system& sys) {
  return uses_tls(sys) ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
}

// Publishing and opening are local: they wait at most this long for the middleman.
constexpr auto local_timeout = std::chrono::seconds(30);

// CAF's handshake errors, said as what they most likely mean here.
caf::error explain(caf::actor_system& sys, caf::error err, const std::string& host, uint16_t port) {
  const std::string where = fmt::format("{}:{}", host, port);
  if (err == caf::sec::disconnect_during_handshake || err == caf::sec::unexpected_message)
    return make_error(
        errc::authentication_failed,
        uses_tls(sys)
            ? fmt::format("the TLS handshake with {} failed: its certificate and ours are not "
                          "from the same CA, or it runs without --tls-dir",
                          where)
            : fmt::format("{} closed the connection during the handshake: does it run with "
                          "--tls-dir? Then this node needs --tls-dir too",
                          where));
  if (err == caf::sec::request_timeout)
    return make_error(errc::timeout,
                      fmt::format("no handshake with {} within the time allowed{}", where,
                                  uses_tls(sys) ? " (does it speak TLS?)" : ""));
  return err;
}

}  // namespace

bool uses_tls(const caf::actor_system& sys) {
  return sys.has_openssl_manager();
}

caf::expected<uint16_t> publish(caf::actor_system& sys, const caf::strong_actor_ptr& whom,
                                std::set<std::string> interface, uint16_t port,
                                const std::string& host) {
  if (!whom) return make_error(errc::bad_configuration, "cannot publish an invalid actor");
  caf::scoped_actor self{sys, true};
  caf::expected<uint16_t> result = make_error(errc::timeout, "the middleman did not answer");
  self->request(manager_of(sys), local_timeout, caf::publish_atom_v, port, whom,
                std::move(interface), host, true)
      .receive([&](uint16_t bound) { result = bound; },
               [&](caf::error& err) { result = std::move(err); });
  return result;
}

void unpublish(caf::actor_system& sys, const caf::actor_addr& whom, uint16_t port) {
  caf::scoped_actor self{sys, true};
  self->send(manager_of(sys), caf::unpublish_atom_v, whom, port);
}

caf::expected<uint16_t> open(caf::actor_system& sys, uint16_t port, const std::string& host) {
  caf::scoped_actor self{sys, true};
  caf::expected<uint16_t> result = make_error(errc::timeout, "the middleman did not answer");
  self->request(manager_of(sys), local_timeout, caf::open_atom_v, port, host, true)
      .receive([&](uint16_t bound) { result = bound; },
               [&](caf::error& err) { result = std::move(err); });
  return result;
}

caf::expected<caf::node_id> connect(caf::actor_system& sys, const std::string& host, uint16_t port,
                                    std::chrono::milliseconds timeout) {
  caf::scoped_actor self{sys, true};
  caf::expected<caf::node_id> result = make_error(errc::timeout, "no answer");
  self->request(manager_of(sys), timeout, caf::connect_atom_v, host, port)
      .receive([&](caf::node_id& node, caf::strong_actor_ptr&,
                   std::set<std::string>&) { result = std::move(node); },
               [&](caf::error& err) { result = explain(sys, std::move(err), host, port); });
  return result;
}

caf::expected<caf::strong_actor_ptr> remote_actor(caf::actor_system& sys,
                                                  const std::set<std::string>& interface,
                                                  const std::string& host, uint16_t port,
                                                  std::chrono::milliseconds timeout) {
  caf::scoped_actor self{sys, true};
  caf::expected<caf::strong_actor_ptr> result = make_error(errc::timeout, "no answer");
  self->request(manager_of(sys), timeout, caf::connect_atom_v, host, port)
      .receive(
          [&](caf::node_id&, caf::strong_actor_ptr& whom, std::set<std::string>& offered) {
            if (!whom)
              result = make_error(errc::bad_configuration,
                                  fmt::format("no actor is published at {}:{}", host, port));
            else if (!sys.assignable(offered, interface))
              result = make_error(errc::bad_configuration,
                                  fmt::format("the actor at {}:{} is not the one expected (another "
                                              "Troupe version?)",
                                              host, port));
            else
              result = std::move(whom);
          },
          [&](caf::error& err) { result = explain(sys, std::move(err), host, port); });
  return result;
}

}  // namespace troupe::net
