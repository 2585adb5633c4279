// A console's view of a node ("nodes", "tree", "buckets", ...), read through the same
// handshake as troupe-console. For tests only.
#pragma once

#include <chrono>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "messages/codec.hpp"
#include "messages/protocol.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/error.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"

namespace troupe::testing {

// The view `name` of the node at console.coordinators, proving console.secret.
inline caf::expected<table_view> console_view(caf::actor_system& sys, const launch_options& console,
                                              const std::string& name, const logger& log) {
  auto node = join_cluster(sys, console, role::console, "test-console", log);
  if (!node) return std::move(node.error());
  caf::scoped_actor self{sys};
  caf::expected<table_view> out = make_error(errc::timeout, "no answer");
  self->request(*node, std::chrono::seconds(30), inspect_atom_v, name)
      .receive([&](const wire& w) { out = decode<table_view>(w); },
               [&](caf::error& err) { out = std::move(err); });
  return out;
}

}  // namespace troupe::testing
