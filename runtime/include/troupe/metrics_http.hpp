// The metrics endpoint of a node: answers `GET /metrics` over HTTP/1.0 with the node's
// registry in the Prometheus text format, and anything else with 404. It binds to the given
// address, serves one connection at a time from its own thread, reads at most 8 KiB of a
// request and waits at most 2 s for it (TLS handshake included). With a TLS directory it
// serves HTTPS with the node's certificate and asks for a client certificate from the same
// CA (Prometheus' tls_config: ca_file, cert_file, key_file); without one, plain HTTP, which
// the options allow on loopback only.
// Owned by launch.cpp for the life of the process (--metrics-port); stopping it joins the
// thread.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include <caf/expected.hpp>

#include "troupe/metrics.hpp"
#include "troupe/options.hpp"

struct ssl_ctx_st;

namespace troupe {

class metrics_endpoint {
 public:
  // Listens on `where` (port 0: any free port); errc::io_failure when it cannot.
  // Each scrape also refreshes the process metrics (update_process_metrics).
  // `tls_dir` (checked, see troupe/tls.hpp) empty: plain HTTP.
  static caf::expected<std::unique_ptr<metrics_endpoint>> start(
      std::shared_ptr<metrics_registry> registry, const host_port& where,
      const std::string& tls_dir = {});

  ~metrics_endpoint();
  metrics_endpoint(const metrics_endpoint&) = delete;
  metrics_endpoint& operator=(const metrics_endpoint&) = delete;

  uint16_t port() const { return port_; }

 private:
  metrics_endpoint(std::shared_ptr<metrics_registry> registry, int listener, uint16_t port,
                   ssl_ctx_st* tls);
  void serve();
  void answer(int fd);

  std::shared_ptr<metrics_registry> registry_;
  int listener_;
  uint16_t port_;
  ssl_ctx_st* tls_;  // null: plain HTTP
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// The HTTP response to one request's text (exposed for tests).
std::string metrics_response(const metrics_registry& registry, const std::string& request);

}  // namespace troupe
