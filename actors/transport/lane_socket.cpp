#include "actors/transport/lane_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <string>

#include "actors/transport/lane_ring.hpp"
#include "troupe/detail/auth.hpp"
#include "troupe/error.hpp"

namespace troupe::lane {

namespace {

using auth::bytes;
using std::chrono::milliseconds;

constexpr const char* lane_name = "data-lane";  // the name a lane's client proves under
constexpr size_t max_node_text = 256;

bool known_kind(uint8_t k) {
  return k >= static_cast<uint8_t>(frame_kind::push) && k <= static_cast<uint8_t>(frame_kind::gone);
}

}  // namespace

caf::error io_error(const char* what) {
  return make_error(errc::io_failure,
                    std::string{"data lane: "} + what + ": " + std::strerror(errno));
}

caf::error await(int fd, short events, milliseconds timeout) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (n > 0) return {};
    if (n == 0) return make_error(errc::timeout, "data lane: the peer went quiet");
    if (errno != EINTR) return io_error("poll");
  }
}

caf::error read_exact(int fd, char* out, size_t n, milliseconds timeout) {
  for (size_t got = 0; got < n;) {
    if (auto err = await(fd, POLLIN, timeout)) return err;
    const ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r == 0) return make_error(errc::io_failure, "data lane: the peer closed the connection");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return io_error("recv");
    }
    got += static_cast<size_t>(r);
  }
  return {};
}

namespace {

caf::error write_all(int fd, const char* data, size_t n) {
  for (size_t sent = 0; sent < n;) {
    const ssize_t w = ::send(fd, data + sent, n - sent, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("send");
    }
    sent += static_cast<size_t>(w);
  }
  return {};
}

caf::error write_bytes(int fd, const bytes& b) {
  return write_all(fd, reinterpret_cast<const char*>(b.data()), b.size());
}

caf::error read_bytes(int fd, bytes& b, size_t n, milliseconds timeout) {
  b.resize(n);
  return read_exact(fd, reinterpret_cast<char*>(b.data()), n, timeout);
}

// A connected TCP socket to host:port within `timeout`.
caf::expected<int> dial(const std::string& host, uint16_t port, milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    return make_error(errc::io_failure, "data lane: cannot resolve " + host);
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (fd < 0) return io_error("socket");
  if (rc != 0 && errno != EINPROGRESS) {
    auto err = io_error("connect");
    ::close(fd);
    return err;
  }
  if (auto err = await(fd, POLLOUT, timeout)) {
    ::close(fd);
    return err;
  }
  int so_error = 0;
  socklen_t len = sizeof so_error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
  if (so_error != 0) {
    ::close(fd);
    errno = so_error;
    return io_error("connect");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

socket_fd::~socket_fd() {
  if (fd_ >= 0) ::close(fd_);
}

void socket_fd::shutdown() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void tune(int fd, milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const bool local =
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && addr.ss_family == AF_UNIX;
  if (local) {
    const int bytes = 4 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  } else {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
}

void name_thread(const char* name) {
  ::pthread_setname_np(::pthread_self(), name);
}

caf::error write_frame(const socket_fd& s, frame_header h, const char* payload) {
  const std::span<const char> whole{payload, h.size};
  return write_frame(s, h, byte_parts{&whole, h.size > 0 ? 1u : 0u});
}

caf::error write_frame(const socket_fd& s, frame_header h, byte_parts payload) {
  auto written = write_frame_from(s, h, payload, 0, true);
  return written ? caf::error{} : std::move(written.error());
}

caf::expected<size_t> write_frame_from(const socket_fd& s, frame_header h, byte_parts payload,
                                       size_t from, bool wait) {
  frame_out frame{h, payload};
  return write_frames_from(s, std::span<frame_out>{&frame, 1}, from, wait);
}

caf::expected<size_t> write_frames_from(const socket_fd& s, std::span<frame_out> frames,
                                        size_t from, bool wait) {
  std::vector<iovec> parts;
  size_t total = 0;
  for (auto& f : frames) {
    f.header.magic = frame_magic;
    parts.push_back({&f.header, sizeof f.header});
    if (!f.header.in_ring)
      for (const auto& p : f.payload)
        if (!p.empty()) parts.push_back({const_cast<char*>(p.data()), p.size()});
    total += sizeof f.header + (f.header.in_ring ? 0 : f.header.size);
  }
  iovec* next = parts.data();
  size_t count = parts.size();
  auto advance = [&](size_t done) {
    for (; done > 0 && count > 0;) {
      const size_t step = std::min(done, next->iov_len);
      next->iov_base = static_cast<char*>(next->iov_base) + step;
      next->iov_len -= step;
      done -= step;
      if (next->iov_len == 0) ++next, --count;
    }
  };
  advance(from);
  size_t written = std::min(from, total);
  while (written < total) {
    if (count == 0) return make_error(errc::malformed_message, "data lane: parts short of size");
    msghdr msg{};
    msg.msg_iov = next;
    msg.msg_iovlen = std::min<size_t>(count, IOV_MAX);
    const ssize_t w = ::sendmsg(s.get(), &msg, MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
    if (w < 0) {
      if (errno == EINTR) continue;
      if (!wait && (errno == EAGAIN || errno == EWOULDBLOCK)) return written;
      return io_error("send");
    }
    written += static_cast<size_t>(w);
    advance(static_cast<size_t>(w));
  }
  return written;
}

caf::expected<bool> frame_reader::readable(std::chrono::milliseconds timeout) {
  if (begin_ < end_) return true;
  return lane::readable(fd_, timeout);
}

caf::error frame_reader::fill(std::chrono::milliseconds timeout, bool forever) {
  begin_ = end_ = 0;  // take() and read() fill an empty buffer only
  for (;;) {
    // Waiting for the next frame blocks in recv (its receive timeout only wakes the loop);
    // within a frame, recv takes what is there and poll bounds the wait for more.
    const ssize_t r =
        ::recv(fd_, buffer_.data() + end_, buffer_.size() - end_, forever ? 0 : MSG_DONTWAIT);
    if (r > 0) {
      end_ += static_cast<size_t>(r);
      return {};
    }
    if (r == 0) return make_error(errc::io_failure, "data lane: the peer closed the connection");
    if (errno == EINTR || (errno == EAGAIN && forever)) continue;
    if (errno != EAGAIN) return io_error("recv");
    if (auto err = await(fd_, POLLIN, timeout)) return err;
  }
}

caf::error frame_reader::take(char* out, size_t n, std::chrono::milliseconds timeout) {
  if (n == 0) return {};
  for (size_t got = 0;;) {
    const size_t here = std::min(n - got, end_ - begin_);
    std::memcpy(out + got, buffer_.data() + begin_, here);
    begin_ += here;
    got += here;
    if (got == n) return {};
    if (n - got >= buffer_.size()) return read_exact(fd_, out + got, n - got, timeout);
    if (auto err = fill(timeout, false)) return err;
  }
}

caf::error frame_reader::read(std::chrono::milliseconds timeout, frame_header& h,
                              wire_bytes& payload, shared_ring* ring,
                              std::shared_ptr<const borrowed_bytes>* lent) {
  if (begin_ == end_)
    if (auto err = fill(timeout, true)) return err;
  if (auto err = take(reinterpret_cast<char*>(&h), sizeof h, timeout)) return err;
  if (h.magic != frame_magic || !known_kind(h.kind))
    return make_error(errc::malformed_message, "data lane: not a frame");
  if (h.size > max_frame_bytes)
    return make_error(errc::message_too_large, "data lane: a frame of " + std::to_string(h.size) +
                                                   " bytes, limit " +
                                                   std::to_string(max_frame_bytes));
  if (h.in_ring) {
    if (!ring) return make_error(errc::malformed_message, "data lane: a ring frame without a ring");
    if (!lent) return ring->take(h.size, payload);
    auto loan = ring->lend(h.size);
    if (!loan) return std::move(loan.error());
    *lent = std::move(*loan);
    return {};
  }
  payload.resize(h.size);
  return take(payload.data(), h.size, timeout);
}

caf::expected<bool> readable(int fd, milliseconds timeout) {
  auto err = await(fd, POLLIN, timeout);
  if (!err) return true;
  if (has_code(err, errc::timeout)) return false;
  return err;
}

caf::expected<std::pair<int, uint16_t>> listen_on(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const char* node = host.empty() ? nullptr : host.c_str();
  if (::getaddrinfo(node, std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    return make_error(errc::io_failure, "data lane: cannot resolve " + host);
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound =
      fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 64) == 0;
  ::freeaddrinfo(found);
  if (!bound) {
    auto err = io_error("listen");
    if (fd >= 0) ::close(fd);
    return err;
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const uint16_t bound_port = addr.ss_family == AF_INET6
                                  ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                  : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return std::make_pair(fd, bound_port);
}

namespace {

// Writes a 2-byte length and the text (at most max_node_text bytes of it).
caf::error write_text(int fd, const std::string& text) {
  const size_t n = std::min(text.size(), max_node_text);
  const bytes length{static_cast<uint8_t>(n & 0xff), static_cast<uint8_t>(n >> 8)};
  if (auto err = write_bytes(fd, length)) return err;
  return write_all(fd, text.data(), n);
}

caf::error read_text(int fd, std::string& out, milliseconds timeout) {
  bytes length, text;
  if (auto err = read_bytes(fd, length, 2, timeout)) return err;
  const size_t n = size_t{length[0]} | (size_t{length[1]} << 8);
  if (n > max_node_text) return make_error(errc::malformed_message, "data lane: text too long");
  if (auto err = read_bytes(fd, text, n, timeout)) return err;
  out.assign(text.begin(), text.end());
  return {};
}

// The client side of the handshake on a connected socket, which it takes over.
caf::expected<lane_peer> prove_to_server(int fd, const std::string& secret, milliseconds timeout) {
  socket_fd s{fd};
  tune(s.get(), timeout);
  const bytes nonce = auth::random_nonce();
  if (nonce.empty()) return make_error(errc::authentication_failed, "no random nonce");
  const uint32_t magic = frame_magic;
  bytes server_nonce, server_proof;
  lane_peer peer;
  caf::error err = write_all(s.get(), reinterpret_cast<const char*>(&magic), sizeof magic);
  if (!err) err = write_bytes(s.get(), nonce);
  if (!err) err = read_bytes(s.get(), server_nonce, auth::nonce_bytes, timeout);
  if (!err) err = read_bytes(s.get(), server_proof, 32, timeout);
  if (!err) err = read_text(s.get(), peer.node, timeout);
  if (err) return err;
  if (!auth::proofs_match(auth::gatekeeper_proof(secret, nonce, server_nonce), server_proof))
    return make_error(errc::authentication_failed,
                      "the data lane's server does not know the secret");
  err =
      write_bytes(s.get(), auth::node_proof(secret, server_nonce, nonce, role::worker, lane_name));
  bytes accepted;
  if (!err) err = read_bytes(s.get(), accepted, 1, timeout);
  if (err || accepted[0] != 1)
    return make_error(errc::authentication_failed, "the data lane's server refused our proof");
  if (auto e = read_text(s.get(), peer.local_name, timeout)) return e;
  peer.fd = ::dup(s.get());  // `s` closes its own copy
  if (peer.fd < 0) return io_error("dup");
  return peer;
}

// The abstract Unix address `name` (no file: it ends with its network namespace's last user).
socklen_t local_address(const std::string& name, sockaddr_un& addr) {
  addr = sockaddr_un{};
  addr.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof addr.sun_path - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);  // sun_path[0] == 0: the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

caf::expected<lane_peer> connect_lane(const std::string& host, uint16_t port,
                                      const std::string& secret, milliseconds timeout) {
  auto fd = dial(host, port, timeout);
  if (!fd) return std::move(fd.error());
  return prove_to_server(*fd, secret, timeout);
}

caf::expected<std::pair<int, std::string>> listen_local() {
  const bytes nonce = auth::random_nonce();
  if (nonce.size() < 8) return make_error(errc::io_failure, "data lane: no random socket name");
  std::string name = "troupe-lane-";
  for (size_t i = 0; i < 8; ++i) {
    constexpr const char* hex = "0123456789abcdef";
    name += hex[nonce[i] >> 4];
    name += hex[nonce[i] & 15];
  }
  sockaddr_un addr;
  const socklen_t len = local_address(name, addr);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error("socket");
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 64) != 0) {
    auto err = io_error("listen on a same-host socket");
    ::close(fd);
    return err;
  }
  return std::make_pair(fd, std::move(name));
}

caf::expected<int> dial_local(const std::string& name, milliseconds timeout) {
  sockaddr_un addr;
  const socklen_t len = local_address(name, addr);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error("socket");
  tune(fd, timeout);  // the send timeout bounds connect() as well
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    auto err = io_error("connect to the same-host socket");
    ::close(fd);
    return err;
  }
  return fd;
}

caf::expected<lane_peer> connect_local(const std::string& name, const std::string& secret,
                                       milliseconds timeout) {
  auto fd = dial_local(name, timeout);
  if (!fd) return std::move(fd.error());
  auto peer = prove_to_server(*fd, secret, timeout);
  if (!peer) return peer;
  auto rings = share_rings(peer->fd, ring_bytes, timeout);
  if (!rings) {
    ::close(peer->fd);
    return std::move(rings.error());
  }
  peer->rings = std::move(*rings);
  return peer;
}

caf::error accept_lane(const socket_fd& s, const std::string& secret, const std::string& node,
                       const std::string& local_name, milliseconds timeout) {
  uint32_t magic = 0;
  bytes client_nonce, client_proof;
  caf::error err = read_exact(s.get(), reinterpret_cast<char*>(&magic), sizeof magic, timeout);
  if (!err && magic != frame_magic)
    err = make_error(errc::malformed_message, "data lane: not a lane handshake");
  if (!err) err = read_bytes(s.get(), client_nonce, auth::nonce_bytes, timeout);
  if (err) return err;
  const bytes nonce = auth::random_nonce();
  if (nonce.empty()) return make_error(errc::authentication_failed, "no random nonce");
  err = write_bytes(s.get(), nonce);
  if (!err) err = write_bytes(s.get(), auth::gatekeeper_proof(secret, client_nonce, nonce));
  if (!err) err = write_text(s.get(), node);
  if (!err) err = read_bytes(s.get(), client_proof, 32, timeout);
  if (err) return err;
  const bytes expected = auth::node_proof(secret, nonce, client_nonce, role::worker, lane_name);
  if (!auth::proofs_match(expected, client_proof))
    return make_error(errc::authentication_failed, "a data lane's client does not know the secret");
  if (auto e = write_bytes(s.get(), bytes{1})) return e;
  return write_text(s.get(), local_name);
}

}  // namespace troupe::lane
