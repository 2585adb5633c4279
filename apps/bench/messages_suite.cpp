// troupe-bench messages: Troupe's messages (pulls and pushes on a one-value bucket, as the
// actors send them: local wires in one process, encoded across two) against plain CAF actors
// doing nothing else (an echo of a number), as round trips one at a time and as pipelined
// requests, in one process and across two processes.
#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "apps/bench/peer.hpp"
#include "apps/bench/suites.hpp"
#include "troupe/net.hpp"

namespace troupe::bench {

namespace {

constexpr auto timeout = std::chrono::seconds(30);
constexpr int messages_per_rep = 2000;

bucket_spec tiny_spec() {
  bucket_spec spec;
  spec.workers = 1;
  spec.tensors.push_back(dense_tensor{"w", {1}, 0, {0.5f}});
  return spec;
}

wire tiny_push(bool in_process) {
  push_request push{0, 0, 0, vector_clock{1}, {}, {}, {}};
  push.dense.push_back(dense_tensor{"w", {1}, 0, {1e-3f}});
  return encode_for(in_process, push);
}

std::optional<bucket_actor> host_tiny_bucket(caf::scoped_actor& self, const server_actor& host) {
  std::optional<bucket_actor> out;
  self->request(host, timeout, host_atom_v, encode(tiny_spec()))
      .receive([&](bucket_actor& b) { out = std::move(b); }, [](caf::error&) {});
  return out;
}

// One request at a time: messages_per_rep round trips per repetition.
template <class Reply, class Handle, class... Ts>
timing round_trips(caf::scoped_actor& self, const Handle& dest, int reps, const Ts&... msg) {
  return measure(1, reps, [&] {
    for (int i = 0; i < messages_per_rep; ++i)
      self->request(dest, timeout, msg...).receive([](const Reply&) {}, [](caf::error&) {});
  });
}

// messages_per_rep requests sent at once, then every reply drained.
template <class Handle, class Reply, class... Ts>
timing pipelined(caf::scoped_actor& self, const Handle& dest, int reps, Reply, const Ts&... msg) {
  return measure(1, reps, [&] {
    for (int i = 0; i < messages_per_rep; ++i) self->send(dest, msg...);
    int i = 0;
    self->receive_for(i, messages_per_rep)([](const Reply&) {});
  });
}

void add_rows(suite_result& result, const std::string& where, caf::scoped_actor& self,
              const bucket_actor& bucket, const echo_actor& echo_peer, int reps) {
  const bool in_process = bucket.node() == self->node();
  const wire pull = encode_for(in_process, pull_request{0, 0, 0});
  const wire push = tiny_push(in_process);
  row r1{where + " round trip (pull)", "msg/s"};
  fill_rate(r1, round_trips<wire>(self, bucket, reps, pull_atom_v, pull), messages_per_rep);
  r1.limit = messages_per_rep / round_trips<uint64_t>(self, echo_peer, reps, uint64_t{7}).median_s;
  r1.limit_name = "plain CAF echo";
  result.rows.push_back(r1);
  row r2{where + " pipelined (push)", "msg/s"};
  fill_rate(r2, pipelined(self, bucket, reps, wire{}, push_atom_v, push), messages_per_rep);
  r2.limit = messages_per_rep / pipelined(self, echo_peer, reps, uint64_t{}, uint64_t{7}).median_s;
  r2.limit_name = "plain CAF echo, pipelined";
  result.rows.push_back(r2);
}

}  // namespace

suite_result run_messages(const options& o) {
  caf::actor_system_config cfg;
  configure_bench_system(cfg, o.tls_dir);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  suite_result result{"messages", {}};
  auto local_host = sys.spawn(bucket_host, std::shared_ptr<lane_listener>{});
  auto local_echo = sys.spawn(echo);
  if (auto bucket = host_tiny_bucket(self, local_host))
    add_rows(result, "in-process", self, *bucket, local_echo, o.reps);
  peer_process peer;
  const auto ports = peer_process::start(o, peer);
  if (!ports) return result;
  auto remote_host = net::remote_actor<server_actor>(sys, "127.0.0.1", ports->host, peer_timeout);
  auto remote_echo = net::remote_actor<echo_actor>(sys, "127.0.0.1", ports->echo, peer_timeout);
  if (remote_host && remote_echo)
    if (auto bucket = host_tiny_bucket(self, *remote_host))
      add_rows(result, "2 processes", self, *bucket, *remote_echo, o.reps);
  self->send_exit(local_host, caf::exit_reason::user_shutdown);
  self->send_exit(local_echo, caf::exit_reason::user_shutdown);
  return result;
}

}  // namespace troupe::bench
