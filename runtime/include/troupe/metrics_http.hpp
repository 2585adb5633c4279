// The metrics endpoint of a node: answers `GET /metrics` over HTTP/1.0 with the node's
// registry in the Prometheus text format, and anything else with 404. It binds to the given
// address (loopback unless the node was started with --insecure), serves one connection at a
// time from its own thread, reads at most 8 KiB of a request and waits at most 2 s for it.
// Owned by launch.cpp for the life of the process (--metrics-port); stopping it joins the
// thread.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include <caf/expected.hpp>

#include "troupe/metrics.hpp"
#include "troupe/options.hpp"

namespace troupe {

class metrics_endpoint {
 public:
  // Listens on `where` (port 0: any free port); errc::io_failure when it cannot.
  // Each scrape also refreshes the process metrics (update_process_metrics).
  static caf::expected<std::unique_ptr<metrics_endpoint>> start(
      std::shared_ptr<metrics_registry> registry, const host_port& where);

  ~metrics_endpoint();
  metrics_endpoint(const metrics_endpoint&) = delete;
  metrics_endpoint& operator=(const metrics_endpoint&) = delete;

  uint16_t port() const { return port_; }

 private:
  metrics_endpoint(std::shared_ptr<metrics_registry> registry, int listener, uint16_t port);
  void serve();

  std::shared_ptr<metrics_registry> registry_;
  int listener_;
  uint16_t port_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// The HTTP response to one request's text (exposed for tests).
std::string metrics_response(const metrics_registry& registry, const std::string& request);

}  // namespace troupe
