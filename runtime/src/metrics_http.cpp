#include "troupe/metrics_http.hpp"

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_connection.hpp"

namespace troupe {

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
    std::shared_ptr<metrics_registry> registry, const host_port& where,
    const std::string& tls_dir) {
  auto opened = http::open_endpoint(where, tls_dir, "metrics");
  if (!opened) return std::move(opened.error());
  return std::unique_ptr<metrics_endpoint>(new metrics_endpoint(
      std::move(registry), opened->socket.fd, opened->socket.port, opened->tls));
}

metrics_endpoint::metrics_endpoint(std::shared_ptr<metrics_registry> registry, int listener,
                                   uint16_t port, ssl_ctx_st* tls)
    : registry_(std::move(registry)), listener_(listener), port_(port), tls_(tls) {
  thread_ = std::thread([this] { serve(); });
}

metrics_endpoint::~metrics_endpoint() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(listener_);
  SSL_CTX_free(tls_);
}

void metrics_endpoint::serve() {
  while (!stopping_) {
    const int fd = http::accept_one(listener_);
    if (fd < 0) continue;
    answer(fd);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }
}

void metrics_endpoint::answer(int fd) {
  using namespace std::chrono;
  http::connection c{fd, tls_, http::steady::now() + milliseconds(http::request_wait_ms)};
  if (!c.open()) return;  // no certificate from our CA: nothing is read
  const std::string request = c.read_request();
  update_process_metrics(*registry_);
  c.write_all(metrics_response(*registry_, request));
}

}  // namespace troupe
