#include "troupe/metrics_http.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "troupe/error.hpp"

namespace troupe {

namespace {

constexpr size_t max_request_bytes = 8192;
constexpr int request_wait_ms = 2000;
constexpr int accept_poll_ms = 200;  // how soon the thread notices it should stop

// Reads until the end of the request head, the cap, or the deadline.
std::string read_request(int fd) {
  std::string request;
  char buffer[2048];
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(request_wait_ms);
  while (request.size() < max_request_bytes && request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
  }
  return request;
}

void write_all(int fd, const std::string& text) {
  for (size_t sent = 0; sent < text.size();) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace

std::string metrics_response(const metrics_registry& registry, const std::string& request) {
  const bool wanted =
      request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0;
  const std::string body = wanted ? registry.prometheus_text() : "not found; try /metrics\n";
  return fmt::format(
      "HTTP/1.0 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      wanted ? "200 OK" : "404 Not Found",
      wanted ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8",
      body.size(), body);
}

caf::expected<std::unique_ptr<metrics_endpoint>> metrics_endpoint::start(
    std::shared_ptr<metrics_registry> registry, const host_port& where) {
  auto fail = [&](const std::string& what) {
    return make_error(errc::io_failure, fmt::format("cannot serve metrics on {}: {} ({})",
                                                    to_string(where), what, std::strerror(errno)));
  };
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(where.port);
  if (::inet_pton(AF_INET, where.host.c_str(), &addr.sin_addr) != 1)
    return make_error(errc::bad_configuration, "metrics: not an IPv4 address: " + where.host);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("socket");
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0) {
    auto err = fail("bind");
    ::close(fd);
    return err;
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return std::unique_ptr<metrics_endpoint>(
      new metrics_endpoint(std::move(registry), fd, ntohs(addr.sin_port)));
}

metrics_endpoint::metrics_endpoint(std::shared_ptr<metrics_registry> registry, int listener,
                                   uint16_t port)
    : registry_(std::move(registry)), listener_(listener), port_(port) {
  thread_ = std::thread([this] { serve(); });
}

metrics_endpoint::~metrics_endpoint() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(listener_);
}

void metrics_endpoint::serve() {
  while (!stopping_) {
    pollfd p{listener_, POLLIN, 0};
    if (::poll(&p, 1, accept_poll_ms) <= 0) continue;
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const std::string request = read_request(fd);
    update_process_metrics(*registry_);
    write_all(fd, metrics_response(*registry_, request));
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }
}

}  // namespace troupe
