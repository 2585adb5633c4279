// The HTTP plumbing the metrics endpoint and the dashboard share: a listening socket on an
// IPv4 address, the HTTPS context (the node's certificate; a client certificate from the same
// CA required), one connection plain or TLS with a deadline on every step, and the request
// head read within a cap. Internal to runtime/src.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/expected.hpp>

#include "troupe/options.hpp"

struct ssl_ctx_st;
struct ssl_st;

namespace troupe::http {

using steady = std::chrono::steady_clock;

constexpr size_t max_request_bytes = 8192;
constexpr int request_wait_ms = 2000;
constexpr int accept_poll_ms = 200;  // how soon a serving thread notices it should stop

// A listening socket bound to `where` (port 0: any free port): its fd and port. `what` names
// the service in errors ("metrics").
struct listener {
  int fd = -1;
  uint16_t port = 0;
};
caf::expected<listener> listen_on(const host_port& where, const std::string& what);

// The HTTPS context for `tls_dir` (checked files, see troupe/tls.hpp); errc::bad_configuration
// naming `what` when a file does not load.
caf::expected<ssl_ctx_st*> https_context(const std::string& tls_dir, const std::string& what);

// What an endpoint serves on: a listening socket bound to `where`, and the HTTPS context when
// `tls_dir` is not empty (none: plain HTTP). Nothing is left open on an error.
struct endpoint_socket {
  listener socket;
  ssl_ctx_st* tls = nullptr;
};
caf::expected<endpoint_socket> open_endpoint(const host_port& where, const std::string& tls_dir,
                                             const std::string& what);

// A connection accepted from `listener` within accept_poll_ms, or -1.
int accept_one(int listener);

// One connection, plain or TLS (non-blocking under TLS, so that every step has the deadline).
class connection {
 public:
  connection(int fd, ssl_ctx_st* tls, steady::time_point deadline);
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  // TLS: the handshake (the client's certificate checked) within the deadline.
  bool open();
  // Up to n bytes; 0 at the end, the deadline, or an error.
  size_t read(char* buffer, size_t n);
  // All of `text` within request_wait_ms from now; false when the peer is gone or too slow.
  bool write_all(const std::string& text);
  // The request head: until its blank line, max_request_bytes, or the deadline.
  std::string read_request();

 private:
  template <class Call>
  int tls_step(Call call);

  int fd_;
  ssl_st* ssl_ = nullptr;
  bool established_ = false;
  steady::time_point deadline_;
};

}  // namespace troupe::http
