// The other end of the cross-process suites: a bucket host (the server_actor interface, so the
// benchmark drives real parameter buckets), a plain echo/counter actor (the CAF baseline), and
// a raw TCP echo server (the socket baseline), all on loopback. peer_process starts this
// program as that peer and stops it again.
#pragma once

#include <caf/actor_system_config.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <cstdio>
#include <optional>

#include "apps/bench/suites.hpp"
#include "messages/protocol.hpp"

namespace troupe::bench {

// Plain CAF actor doing nothing else: echoes a number, counts one-way numbers.
using echo_actor =
    caf::typed_actor<caf::replies_to<uint64_t>::with<uint64_t>, caf::reacts_to<uint32_t>,
                     caf::replies_to<stats_atom>::with<uint64_t>>;

struct echo_state {
  uint64_t count = 0;
};

echo_actor::behavior_type echo(echo_actor::stateful_pointer<echo_state> self);

// A server_actor without a coordinator: hosts buckets for the benchmark, quits on stop.
server_actor::behavior_type bucket_host(server_actor::pointer self);

// Troupe's CAF settings (mutual TLS with the files of `tls_dir`, unless empty) plus the
// benchmark's own message types.
void configure_bench_system(caf::actor_system_config& cfg, const std::string& tls_dir);

// How long a suite waits to reach its peer.
constexpr std::chrono::milliseconds peer_timeout{30000};

struct peer_ports {
  uint16_t host = 0;
  uint16_t echo = 0;
  uint16_t raw = 0;
};

// A running peer process; stops it (by closing its stdin) when destroyed.
class peer_process {
 public:
  // Starts `o.self_binary serve`, with TROUPE_TLS_DIR set to o.tls_dir.
  static std::optional<peer_ports> start(const options& o, peer_process& out);
  ~peer_process();

 private:
  FILE* pipe_ = nullptr;
};

}  // namespace troupe::bench
