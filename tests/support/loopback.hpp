// Test helpers for loopback sockets: a free port, a connection, a whole send, and an HTTP GET
// (metrics, the dashboard). For tests only.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <string>

namespace troupe::testing {

// A loopback port that was free a moment ago, and not handed out before by this process (two
// calls in a row may otherwise get the same port back from the kernel: a coordinator's
// --listen and its --metrics-port once did).
inline uint16_t free_port() {
  static std::mutex guard;
  static std::set<uint16_t> handed_out;
  std::lock_guard<std::mutex> lock(guard);
  uint16_t port = 0;
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    port = ntohs(addr.sin_port);
    if (handed_out.insert(port).second) break;
  }
  return port;
}

// A socket connected to 127.0.0.1:port, or -1 when nobody listens there.
inline int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// Sends all of `bytes` on `fd` (MSG_NOSIGNAL: a peer that hung up is not SIGPIPE); false when
// the connection failed first.
inline bool send_all(int fd, const char* bytes, size_t size) {
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = ::send(fd, bytes + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// The whole HTTP response to GET `path` on 127.0.0.1:port (empty when nobody answers).
inline std::string http_get(uint16_t port, const std::string& path) {
  const int fd = connect_loopback(port);
  if (fd < 0) return "";
  std::string out;
  const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
  if (send_all(fd, request.data(), request.size())) {
    char buffer[4096];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) out.append(buffer, n);
  }
  ::close(fd);
  return out;
}

}  // namespace troupe::testing
