#include "apps/bench/peer.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <iostream>
#include <thread>

#include "actors/bucket/parameter_bucket.hpp"
#include "actors/transport/lane_socket.hpp"
#include "apps/bench/suites.hpp"
#include "troupe/detail/auth.hpp"
#include "troupe/net.hpp"
#include "troupe/node.hpp"

namespace troupe::bench {

echo_actor::behavior_type echo(echo_actor::stateful_pointer<echo_state> self) {
  return {
      [](uint64_t x) { return x; },
      [=](uint32_t) { ++self->state.count; },
      [=](stats_atom) { return self->state.count; },
  };
}

server_actor::behavior_type bucket_host(server_actor::pointer self,
                                        std::shared_ptr<lane_listener> lanes) {
  return {
      [=](host_atom, const wire& w) -> caf::result<bucket_actor> {
        auto spec = decode<bucket_spec>(w);
        if (!spec) return std::move(spec.error());
        const bucket_actor_config config{
            self->address(), fixed_link(caf::actor_cast<coordinator_actor>(self)),
            std::chrono::seconds(30), logger{"bench-bucket", log_level::error}};
        auto bucket = self->spawn<caf::linked>(
            parameter_bucket, std::make_shared<bucket_store>(std::move(*spec)), config);
        if (lanes) lanes->enroll(bucket);
        return bucket;
      },
      [=](stop_atom, const std::string&) {
        self->quit();
        return true;
      },
      [](peer_atom, const std::string&, uint16_t) { return false; },
      [](moved_atom, const std::string&, const caf::actor&) {},
      [=](fault_atom) { self->quit(); },
      [](metrics_atom) { return std::string{}; },  // the bench host keeps no metrics
      [](log_atom, const std::string&) {},
      [](usage_atom) { return current_process_usage().peak_rss_bytes; },
      [](rejoin_atom, uint64_t) {},  // the bench host has no coordinator to rejoin
  };
}

void configure_bench_system(caf::actor_system_config& cfg, const std::string& tls_dir) {
  launch_options opts;
  opts.tls_dir = tls_dir;
  configure_actor_system(cfg, opts);
  cfg.add_message_type<echo_actor>("troupe::bench::echo_actor");
}

namespace {

// Accepts connections one after another and echoes every byte back until the peer closes.
// A Unix socket (`local`) gets the data lane's buffer sizes (lane::tune).
void raw_echo_server(int listener, bool local) {
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    if (local) lane::tune(fd, std::chrono::hours(24));
    for (;;) {
      const ssize_t got = ::read(fd, buffer.data(), buffer.size());
      if (got <= 0) break;
      for (ssize_t sent = 0; sent < got;) {
        const ssize_t n = ::write(fd, buffer.data() + sent, got - sent);
        if (n <= 0) break;
        sent += n;
      }
    }
    ::close(fd);
  }
}

int loopback_listener(uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 4) != 0)
    return -1;
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

int serve_peer(const std::string& tls_dir) {
  caf::actor_system_config cfg;
  configure_bench_system(cfg, tls_dir);
  caf::actor_system sys{cfg};
  const char* secret = std::getenv(lane_secret_variable);
  std::shared_ptr<lane_listener> lanes;
  if (tls_dir.empty() && secret && *secret) {
    auto started =
        lane_listener::start(sys, lane_listener_config{"127.0.0.1", 0, secret, peer_timeout,
                                                       logger{"bench-lane", log_level::error}});
    if (started) lanes = std::move(*started);
  }
  auto host = sys.spawn(bucket_host, lanes);
  auto counter = sys.spawn(echo);
  auto host_port = net::publish(host, 0, "127.0.0.1");
  auto echo_port = net::publish(counter, 0, "127.0.0.1");
  peer_ports ports;
  const int listener = loopback_listener(ports.raw);
  if (!host_port || !echo_port || listener < 0) {
    std::cerr << "troupe-bench peer: cannot listen on loopback\n";
    return 1;
  }
  std::thread(raw_echo_server, listener, false).detach();
  auto local = lane::listen_local();  // none: the suite leaves out its Unix socket rows
  if (local) std::thread(raw_echo_server, local->first, true).detach();
  std::cout << "ports " << *host_port << ' ' << *echo_port << ' ' << ports.raw << ' '
            << (lanes ? lanes->port() : 0) << ' ' << (local ? local->second : "none") << std::endl;
  // The parent closes our stdin when it is done with us.
  std::string ignored;
  while (std::getline(std::cin, ignored)) {
  }
  caf::scoped_actor self{sys};
  self->send_exit(host, caf::exit_reason::user_shutdown);
  self->send_exit(counter, caf::exit_reason::user_shutdown);
  ::shutdown(listener, SHUT_RDWR);
  if (local) ::shutdown(local->first, SHUT_RDWR);
  if (lanes) lanes->stop();
  return 0;
}

std::optional<peer_ports> peer_process::start(const options& o, peer_process& out) {
  // "w": we hold the peer's stdin; its stdout (the ports line) comes through a file.
  const std::string ports_file = "/tmp/troupe-bench-peer-" + std::to_string(::getpid());
  // The peer reads TROUPE_TLS_DIR, as every Troupe binary does.
  if (o.tls_dir.empty())
    ::unsetenv("TROUPE_TLS_DIR");
  else
    ::setenv("TROUPE_TLS_DIR", o.tls_dir.c_str(), 1);
  const auto nonce = auth::random_nonce();
  out.lane_secret_ = fmt::format("{:02x}", fmt::join(nonce, ""));
  ::setenv(lane_secret_variable, out.lane_secret_.c_str(), 1);
  out.pipe_ = ::popen((o.self_binary + " serve > " + ports_file).c_str(), "w");
  if (!out.pipe_) return std::nullopt;
  for (int i = 0; i < 200; ++i) {
    FILE* f = std::fopen(ports_file.c_str(), "r");
    peer_ports p;
    unsigned a = 0, b = 0, c = 0, d = 0;
    char name[64] = {};
    if (f && std::fscanf(f, "ports %u %u %u %u %63s", &a, &b, &c, &d, name) == 5) {
      std::fclose(f);
      std::remove(ports_file.c_str());
      p.host = static_cast<uint16_t>(a);
      p.echo = static_cast<uint16_t>(b);
      p.raw = static_cast<uint16_t>(c);
      p.lane = static_cast<uint16_t>(d);
      p.raw_local = name;
      return p;
    }
    if (f) std::fclose(f);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

peer_process::~peer_process() {
  if (pipe_) ::pclose(pipe_);
}

}  // namespace troupe::bench
