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

#include "actors/transport/lane_server.hpp"
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

// A server_actor without a coordinator: hosts buckets for the benchmark (enrolled with `lanes`
// when there is one), quits on stop.
server_actor::behavior_type bucket_host(server_actor::pointer self,
                                        std::shared_ptr<lane_listener> lanes);

// The environment variable through which the suite gives its peer the data lane's secret.
constexpr const char* lane_secret_variable = "TROUPE_BENCH_LANE_SECRET";

// Troupe's CAF settings (mutual TLS with the files of `tls_dir`, unless empty) plus the
// benchmark's own message types.
void configure_bench_system(caf::actor_system_config& cfg, const std::string& tls_dir);

// How long a suite waits to reach its peer.
constexpr std::chrono::milliseconds peer_timeout{30000};

struct peer_ports {
  uint16_t host = 0;
  uint16_t echo = 0;
  uint16_t raw = 0;
  uint16_t lane = 0;      // the bucket host's data lane (0: none, under TLS)
  std::string raw_local;  // a raw echo server on a same-host Unix socket: its name
};

// A running peer process; stops it (by closing its stdin) when destroyed.
class peer_process {
 public:
  // Starts `o.self_binary serve`, with TROUPE_TLS_DIR set to o.tls_dir and a fresh data lane
  // secret (lane_secret()).
  static std::optional<peer_ports> start(const options& o, peer_process& out);
  ~peer_process();
  const std::string& lane_secret() const { return lane_secret_; }

 private:
  FILE* pipe_ = nullptr;
  std::string lane_secret_;
};

}  // namespace troupe::bench
