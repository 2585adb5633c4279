#include "troupe/metrics_http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "troupe/error.hpp"
#include "troupe/tls.hpp"

namespace troupe {

namespace {

constexpr size_t max_request_bytes = 8192;
constexpr int request_wait_ms = 2000;
constexpr int accept_poll_ms = 200;  // how soon the thread notices it should stop

using steady = std::chrono::steady_clock;

int ms_left(steady::time_point deadline) {
  return static_cast<int>(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count()));
}

bool wait_for(int fd, short events, steady::time_point deadline) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, ms_left(deadline)) > 0;
}

// One scrape's connection, plain or TLS (non-blocking, so that every step has the deadline).
class scrape_connection {
 public:
  scrape_connection(int fd, SSL_CTX* tls, steady::time_point deadline)
      : fd_(fd), deadline_(deadline) {
    if (!tls) return;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ssl_ = SSL_new(tls);
    if (ssl_) SSL_set_fd(ssl_, fd);
  }
  ~scrape_connection() {
    if (ssl_ && established_) SSL_shutdown(ssl_);
    if (ssl_) SSL_free(ssl_);
    ERR_clear_error();
  }
  scrape_connection(const scrape_connection&) = delete;
  scrape_connection& operator=(const scrape_connection&) = delete;

  // TLS: the handshake (the client's certificate checked) within the deadline.
  bool open(bool tls) {
    if (!tls) return true;
    if (!ssl_) return false;
    established_ = tls_step([&] { return SSL_accept(ssl_); }) > 0;
    return established_;
  }

  // Up to n bytes; 0 at the end, the deadline, or an error.
  size_t read(char* buffer, size_t n) {
    if (ssl_) {
      const int got = tls_step([&] { return SSL_read(ssl_, buffer, static_cast<int>(n)); });
      return got > 0 ? static_cast<size_t>(got) : 0;
    }
    if (!wait_for(fd_, POLLIN, deadline_)) return 0;
    const ssize_t got = ::read(fd_, buffer, n);
    return got > 0 ? static_cast<size_t>(got) : 0;
  }

  void write_all(const std::string& text) {
    deadline_ = steady::now() + std::chrono::milliseconds(request_wait_ms);
    for (size_t sent = 0; sent < text.size();) {
      const size_t left = text.size() - sent;
      const ssize_t n = ssl_ ? tls_step([&] {
        return SSL_write(ssl_, text.data() + sent, static_cast<int>(left));
      })
                             : ::send(fd_, text.data() + sent, left, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }

 private:
  // Repeats an OpenSSL call while it wants to read or write, until the deadline.
  template <class Call>
  int tls_step(Call call) {
    for (;;) {
      const int r = call();
      if (r > 0) return r;
      const int why = SSL_get_error(ssl_, r);
      const short events = why == SSL_ERROR_WANT_READ    ? POLLIN
                           : why == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                         : 0;
      if (events == 0 || !wait_for(fd_, events, deadline_)) return -1;
    }
  }

  int fd_;
  SSL* ssl_ = nullptr;
  bool established_ = false;
  steady::time_point deadline_;
};

// Reads until the end of the request head, the cap, or the deadline.
std::string read_request(scrape_connection& c) {
  std::string request;
  char buffer[2048];
  while (request.size() < max_request_bytes && request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos) {
    const size_t n = c.read(buffer, sizeof buffer);
    if (n == 0) break;
    request.append(buffer, n);
  }
  return request;
}

// A server context with the node's certificate that requires a client certificate from the
// same CA; null (the reason in `why`) when a file does not load.
SSL_CTX* https_context(const std::string& tls_dir, std::string& why) {
  const auto files = tls::files_in(tls_dir);
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx && SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1 &&
      SSL_CTX_use_certificate_chain_file(ctx, files.cert.c_str()) == 1 &&
      SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) == 1 &&
      SSL_CTX_check_private_key(ctx) == 1 &&
      SSL_CTX_load_verify_locations(ctx, files.ca.c_str(), nullptr) == 1) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    return ctx;
  }
  char text[256] = "out of memory";
  if (auto code = ERR_get_error()) ERR_error_string_n(code, text, sizeof text);
  ERR_clear_error();
  why = text;
  SSL_CTX_free(ctx);
  return nullptr;
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
    std::shared_ptr<metrics_registry> registry, const host_port& where,
    const std::string& tls_dir) {
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
  SSL_CTX* tls = nullptr;
  if (!tls_dir.empty()) {
    tls::guard_openssl_calls();  // a scraper that hangs up is not SIGPIPE
    std::string why;
    tls = https_context(tls_dir, why);
    if (!tls) {
      ::close(fd);
      return make_error(errc::bad_configuration, "metrics: cannot serve HTTPS: " + why);
    }
  }
  return std::unique_ptr<metrics_endpoint>(
      new metrics_endpoint(std::move(registry), fd, ntohs(addr.sin_port), tls));
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
    pollfd p{listener_, POLLIN, 0};
    if (::poll(&p, 1, accept_poll_ms) <= 0) continue;
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    answer(fd);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }
}

void metrics_endpoint::answer(int fd) {
  scrape_connection c{fd, tls_, steady::now() + std::chrono::milliseconds(request_wait_ms)};
  if (!c.open(tls_ != nullptr)) return;  // no certificate from our CA: nothing is read
  const std::string request = read_request(c);
  update_process_metrics(*registry_);
  c.write_all(metrics_response(*registry_, request));
}

}  // namespace troupe
