#include "http_connection.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "troupe/error.hpp"
#include "troupe/tls.hpp"

namespace troupe::http {

namespace {

int ms_left(steady::time_point deadline) {
  return static_cast<int>(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count()));
}

bool wait_for(int fd, short events, steady::time_point deadline) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, ms_left(deadline)) > 0;
}

}  // namespace

connection::connection(int fd, SSL_CTX* tls, steady::time_point deadline)
    : fd_(fd), deadline_(deadline) {
  if (!tls) return;
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  ssl_ = SSL_new(tls);
  if (ssl_) SSL_set_fd(ssl_, fd);
}

connection::~connection() {
  if (ssl_ && established_) SSL_shutdown(ssl_);
  if (ssl_) SSL_free(ssl_);
  ERR_clear_error();
}

bool connection::open() {
  if (!ssl_) return true;
  established_ = tls_step([&] { return SSL_accept(ssl_); }) > 0;
  return established_;
}

size_t connection::read(char* buffer, size_t n) {
  if (ssl_) {
    const int got = tls_step([&] { return SSL_read(ssl_, buffer, static_cast<int>(n)); });
    return got > 0 ? static_cast<size_t>(got) : 0;
  }
  if (!wait_for(fd_, POLLIN, deadline_)) return 0;
  const ssize_t got = ::read(fd_, buffer, n);
  return got > 0 ? static_cast<size_t>(got) : 0;
}

bool connection::write_all(const std::string& text) {
  deadline_ = steady::now() + std::chrono::milliseconds(request_wait_ms);
  for (size_t sent = 0; sent < text.size();) {
    const size_t left = text.size() - sent;
    ssize_t n = 0;
    if (ssl_) {
      n = tls_step([&] { return SSL_write(ssl_, text.data() + sent, static_cast<int>(left)); });
    } else {
      if (!wait_for(fd_, POLLOUT, deadline_)) return false;
      n = ::send(fd_, text.data() + sent, left, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    }
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::string connection::read_request() {
  std::string request;
  char buffer[2048];
  while (request.size() < max_request_bytes && request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos) {
    const size_t n = read(buffer, sizeof buffer);
    if (n == 0) break;
    request.append(buffer, n);
  }
  return request;
}

// Repeats an OpenSSL call while it wants to read or write, until the deadline.
template <class Call>
int connection::tls_step(Call call) {
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

caf::expected<listener> listen_on(const host_port& where, const std::string& what) {
  auto fail = [&](const std::string& step) {
    return make_error(errc::io_failure, fmt::format("cannot serve {} on {}: {} ({})", what,
                                                    to_string(where), step, std::strerror(errno)));
  };
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(where.port);
  if (::inet_pton(AF_INET, where.host.c_str(), &addr.sin_addr) != 1)
    return make_error(errc::bad_configuration, what + ": not an IPv4 address: " + where.host);
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
  return listener{fd, ntohs(addr.sin_port)};
}

caf::expected<SSL_CTX*> https_context(const std::string& tls_dir, const std::string& what) {
  tls::guard_openssl_calls();  // a client that hangs up is not SIGPIPE
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
  SSL_CTX_free(ctx);
  return make_error(errc::bad_configuration, what + ": cannot serve HTTPS: " + text);
}

caf::expected<endpoint_socket> open_endpoint(const host_port& where, const std::string& tls_dir,
                                             const std::string& what) {
  auto listening = listen_on(where, what);
  if (!listening) return std::move(listening.error());
  if (tls_dir.empty()) return endpoint_socket{*listening, nullptr};
  auto context = https_context(tls_dir, what);
  if (!context) {
    ::close(listening->fd);
    return std::move(context.error());
  }
  return endpoint_socket{*listening, *context};
}

int accept_one(int listener) {
  pollfd p{listener, POLLIN, 0};
  if (::poll(&p, 1, accept_poll_ms) <= 0) return -1;
  return ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
}

}  // namespace troupe::http
