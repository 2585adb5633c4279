// The live web dashboard of a job (--dashboard-port P on the coordinator): a page, its script
// and its style (built into the binary; nothing is fetched from outside the host), the job's
// state as JSON (GET /state) and the same state pushed to each viewer as it changes (GET
// /events, server-sent events: one connection per viewer, at most `max_viewers`, the rest
// answered 503). The state comes from `snapshot` (the coordinator's views, as JSON text),
// called at most once per `every` however many watch, and only while someone does.
// Read-only: there is no action here (they stay in the console, where operator rights are
// checked). The same rules as the metrics endpoint: plain HTTP on loopback only (the options
// refuse more), HTTPS with a client certificate from the cluster's CA under a TLS directory;
// a request whose Host is not the bound address is refused (DNS rebinding); every response
// carries a content security policy of 'self', and the page writes the job's names as text,
// never as markup. Owned by launch.cpp for the life of the coordinator; stopping it joins its
// threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/expected.hpp>

#include "troupe/options.hpp"

struct ssl_ctx_st;

namespace troupe::http {
class connection;  // runtime/src/http_connection.hpp
}

namespace troupe {

class dashboard_endpoint {
 public:
  using snapshot_source = std::function<std::string()>;

  // Listens on `where` (port 0: any free port); errc::io_failure when it cannot.
  static caf::expected<std::unique_ptr<dashboard_endpoint>> start(
      snapshot_source snapshot, const host_port& where, const std::string& tls_dir = {},
      size_t max_viewers = 16, std::chrono::milliseconds every = std::chrono::seconds(1));

  ~dashboard_endpoint();
  dashboard_endpoint(const dashboard_endpoint&) = delete;
  dashboard_endpoint& operator=(const dashboard_endpoint&) = delete;

  uint16_t port() const { return port_; }

 private:
  dashboard_endpoint(snapshot_source snapshot, int listener, std::string authority, uint16_t port,
                     ssl_ctx_st* tls, size_t max_viewers, std::chrono::milliseconds every);
  void serve();
  void answer(int fd);
  void stream(http::connection& c);  // one viewer's /events, on its own thread
  void reap();                       // joins the viewers' threads that have ended
  // The newest state and its number, sampled again when older than `every_`.
  std::pair<std::string, uint64_t> latest();

  snapshot_source snapshot_;
  int listener_;
  std::string authority_;  // host:port, what a request's Host must say
  uint16_t port_;
  ssl_ctx_st* tls_;
  size_t max_viewers_;
  std::chrono::milliseconds every_;
  std::atomic<bool> stopping_{false};
  std::mutex lock_;  // guards what follows
  std::condition_variable changed_;
  std::string state_;
  uint64_t version_ = 0;
  std::chrono::steady_clock::time_point sampled_{};
  bool sampling_ = false;
  size_t viewers_ = 0;
  std::vector<std::thread> streams_;
  std::vector<std::thread::id> ended_;  // of those
  std::thread thread_;
};

// What the endpoint answers to a request for anything but /events (exposed for tests):
// `authority` is the bound host:port, `state` the JSON to send for /state.
std::string dashboard_response(const std::string& request, const std::string& authority,
                               const std::function<std::string()>& state);

// Whether `request`'s Host header names `authority` (or localhost on its port, when bound to
// a loopback address).
bool dashboard_host_ok(const std::string& request, const std::string& authority);

}  // namespace troupe
