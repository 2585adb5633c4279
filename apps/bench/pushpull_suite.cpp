// troupe-bench pushpull: a dense push then pull of n floats between two processes on
// loopback, through real parameter buckets (1 MiB slices, 8 requests in flight, encode and
// decode included), against a raw socket pair moving the same 8n bytes (n each way). Each size
// is measured over the data lane on TCP (what workers on another host use without TLS) and
// over CAF alone, both beside raw TCP, and over the lane's same-host Unix socket (what workers
// on the server's host use) beside a raw Unix socket. A size's cases take turns, one
// repetition each per round, so that each shares its limit's moments of a noisy machine.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <deque>
#include <optional>
#include <thread>

#include "actors/transport/bucket_channel.hpp"
#include "actors/transport/lane_client.hpp"
#include "actors/transport/lane_socket.hpp"
#include "apps/bench/peer.hpp"
#include "apps/bench/suites.hpp"
#include "troupe/net.hpp"

namespace troupe::bench {

namespace {

constexpr auto timeout = std::chrono::seconds(60);
constexpr size_t slice_values = size_t{1} << 18;  // 1 MiB of fp32 per bucket
constexpr size_t window = 8;                      // requests in flight

// Sends request(i) for i < count with at most `window` in flight, handing reply i to got(i, w).
template <class Issue, class Got>
bool windowed(size_t count, Issue issue, Got got) {
  std::deque<std::pair<size_t, decltype(issue(size_t{0}))>> in_flight;
  size_t next = 0;
  bool ok = true;
  while (next < count || !in_flight.empty()) {
    while (next < count && in_flight.size() < window) {
      in_flight.emplace_back(next, issue(next));
      ++next;
    }
    const size_t i = in_flight.front().first;
    in_flight.front().second.receive([&](const wire& w) { got(i, w); },
                                     [&](caf::error&) { ok = false; });
    in_flight.pop_front();
  }
  return ok;
}

struct hosted {
  std::vector<bucket_actor> buckets;
  std::vector<dense_tensor> grads;   // one per bucket
  std::vector<dense_tensor> params;  // one per bucket: where its pulls are read to
};

std::optional<hosted> host_buckets(caf::scoped_actor& self, const server_actor& host, size_t n) {
  hosted out;
  for (size_t first = 0, b = 0; first < n; first += slice_values, ++b) {
    const auto len = static_cast<uint32_t>(std::min(slice_values, n - first));
    bucket_spec spec;
    spec.bucket = static_cast<uint32_t>(b);
    spec.workers = 1;
    spec.optimizer.type = optimizer_config::kind::sgd;
    spec.tensors.push_back(dense_tensor{"t", {len}, 0, random_values(len, 10 + b)});
    bool ok = false;
    self->request(host, timeout, host_atom_v, encode(spec))
        .receive(
            [&](bucket_actor& bucket) {
              out.buckets.push_back(std::move(bucket));
              ok = true;
            },
            [](caf::error&) {});
    if (!ok) return std::nullopt;
    out.grads.push_back(dense_tensor{"t", {len}, 0, random_values(len, 20 + b, 1e-3f)});
    out.params.push_back(dense_tensor{"t", {len}, 0, std::vector<float>(len)});
  }
  return out;
}

// One push and one pull of every bucket, as a worker sends them through `channel`: each
// bucket's pull right behind its push (the bucket answers it once the push is applied),
// `window` requests in flight. As a worker does, a push is encoded from the gradient where it
// is, and a pull reply read straight into the bucket's parameters.
void push_pull(caf::scoped_actor& self, hosted& h, bucket_channel& channel) {
  windowed(
      2 * h.buckets.size(),
      [&](size_t i) {
        const auto b = static_cast<uint32_t>(i / 2);
        if (i % 2 == 1)
          return answer_to(self.ptr(), channel.pull(self.ptr(), h.buckets[b], {b, 0, 0}));
        const auto& g = h.grads[b];
        size_t bytes = 0;
        const auto id = channel.push(
            self.ptr(), h.buckets[b], push_request{b, 0, 0, vector_clock{1}, {}, {}, {}},
            std::vector<dense_view>{dense_view{g.name, g.shape, 0, g.values}}, bytes);
        return answer_to(self.ptr(), id);
      },
      [&](size_t i, const wire& w) {
        if (i % 2 == 0) return (void)decode<push_ack>(w);
        (void)decode_pull_into(
            w, [&](const dense_tensor&) { return std::span<float>{h.params[i / 2].values}; });
      });
}

// Sends `out` to the echo peer from one thread while reading it back on this one.
void raw_round_trip(int fd, const std::vector<char>& out, std::vector<char>& in) {
  const size_t bytes = out.size();
  std::thread writer([&] {
    for (size_t sent = 0; sent < bytes;) {
      const ssize_t n = ::write(fd, out.data() + sent, bytes - sent);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  });
  for (size_t got = 0; got < bytes;) {
    const ssize_t n = ::read(fd, in.data(), std::min(in.size(), bytes - got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  writer.join();
}

int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string size_name(size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB"
                            : std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

suite_result run_pushpull(const options& o) {
  caf::actor_system_config cfg;
  configure_bench_system(cfg, o.tls_dir);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  suite_result result{"pushpull", {}};
  peer_process peer;
  const auto ports = peer_process::start(o, peer);
  if (!ports) return result;
  auto host = net::remote_actor<server_actor>(sys, "127.0.0.1", ports->host, peer_timeout);
  const int fd = connect_loopback(ports->raw);
  if (!host || fd < 0) return result;
  // The peer's raw Unix socket, where it has one (-1: no Unix socket rows).
  const int local_fd = [&] {
    auto dialed = ports->raw_local == "none" ? caf::expected<int>{caf::error{}}
                                             : lane::dial_local(ports->raw_local, peer_timeout);
    return dialed ? *dialed : -1;
  }();
  // The data lanes a worker on this host would use (none under TLS): over TCP, as between two
  // hosts, and over the peer's same-host Unix socket.
  std::shared_ptr<lane_link> tcp_lane, local_lane;
  if (ports->lane != 0) {
    for (const bool same_host : {false, true}) {
      auto opened =
          lane_link::open("127.0.0.1", ports->lane, peer.lane_secret(), peer_timeout, same_host);
      if (opened && (*opened)->local() == same_host) (same_host ? local_lane : tcp_lane) = *opened;
    }
  }
  std::vector<size_t> sizes{size_t{4} << 10, size_t{64} << 10, size_t{1} << 20, size_t{16} << 20,
                            size_t{64} << 20};
  if (o.size != 0) sizes = {o.size * sizeof(float)};  // --size N: only N values
  for (size_t bytes : sizes) {
    const size_t n = bytes / sizeof(float);
    auto h = host_buckets(self, *host, n);
    if (!h) break;
    const double gigabytes = 8.0 * double(n) / 1e9;
    std::vector<char> out(bytes, 'x'), in(std::min<size_t>(bytes, 1 << 20));
    // Through the channels a worker uses: over a lane a push is encoded onto the socket.
    auto over_lane = [&](std::shared_ptr<lane_link> lane) {
      return [&, lane] { push_pull(self, *h, *lane); };
    };
    auto over_caf = [&, channel = caf_channel_of(timeout)] { push_pull(self, *h, *channel); };
    // Each case beside its raw peer, all of them round by round (measure_interleaved).
    struct named_case {
      std::string how;
      std::function<void()> once;
      size_t limit;  // index of the case it is compared with
    };
    std::vector<named_case> cases;
    cases.push_back({"raw TCP, same bytes", [&] { raw_round_trip(fd, out, in); }, 0});
    if (tcp_lane) cases.push_back({"data lane, TCP", over_lane(tcp_lane), 0});
    cases.push_back({"CAF", over_caf, 0});
    if (local_lane && local_fd >= 0) {
      cases.push_back(
          {"raw Unix socket, same bytes", [&] { raw_round_trip(local_fd, out, in); }, 0});
      cases.back().limit = cases.size() - 1;
      cases.push_back({"data lane, same host", over_lane(local_lane), cases.size() - 1});
    }
    std::vector<std::function<void()>> runs;
    for (const auto& c : cases) runs.push_back(c.once);
    const auto timings = measure_interleaved(1, o.reps, runs);
    for (size_t c = 0; c < cases.size(); ++c) {
      if (cases[c].limit == c) continue;  // a raw peer: the limit of the rows after it
      row r{"push+pull " + size_name(bytes) + " (" + cases[c].how + ")", "GB/s"};
      fill_rate(r, timings[c], gigabytes);
      r.limit = gigabytes / timings[cases[c].limit].median_s;
      r.limit_name = cases[cases[c].limit].how;
      result.rows.push_back(r);
    }
  }
  ::close(fd);
  if (local_fd >= 0) ::close(local_fd);
  return result;
}

}  // namespace troupe::bench
