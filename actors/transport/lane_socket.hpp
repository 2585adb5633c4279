// The data lane's socket layer: a TCP connection beside CAF (or, between processes of one host,
// a Unix socket) that carries the bytes of pushes, pulls and their replies between a worker and
// the buckets of one server node, so that tensor bytes are written once from the message and
// read once into it (CAF's BASP copies them into and out of its own buffers and moves them on
// one multiplexer thread per node).
//
// A lane opens with the cluster-secret handshake (troupe::auth, the gatekeeper's proofs over
// fresh nonces, both ways) and then carries frames: a 32-byte header and a payload of at most
// max_frame_bytes. Every read and write has a bound except waiting for the next frame's first
// byte, which ends when the socket is shut down. Used by lane_server and lane_client only.
// Little-endian hosts only (the header is written as it is in memory).
#pragma once

#include <caf/expected.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/transport/lane_ring.hpp"
#include "messages/codec.hpp"
#include "troupe/log.hpp"

namespace troupe::lane {

// Above every message the codec accepts (codec_limits::max_bytes) by a margin: a larger frame
// is refused before a byte of it is read, and the connection dropped.
constexpr uint64_t max_frame_bytes = (uint64_t{codec_limits{}.max_bytes}) + (uint64_t{1} << 20);

enum class frame_kind : uint8_t {
  push = 1,     // worker to server: push_request bytes for `target`
  pull = 2,     // worker to server: pull_request bytes for `target`
  reply = 3,    // server to worker: the bucket's answer (push_ack or pull_reply bytes)
  refusal = 4,  // server to worker: the bucket's troupe error; payload: code byte, then text
  gone = 5,     // server to worker: no such bucket here, or it did not answer; payload: text
};

struct frame_header {
  uint32_t magic = 0;
  uint8_t kind = 0;
  uint8_t in_ring = 0;  // 1: the payload is in the sender's shared ring, not on the socket
  // 1 on a push whose answer may wait for the answer to the next frame, a pull of the same
  // bucket numbered id + 1 (one step's push and pull, answered in one write). Only for pulls
  // the bucket answers at once (async): a held pull would hold the push's answer too.
  uint8_t paired = 0;
  uint8_t unused = 0;
  uint64_t id = 0;      // the worker's request number, echoed in the answer
  uint64_t target = 0;  // the bucket's CAF actor id (requests only)
  uint64_t size = 0;    // payload bytes (after the header, or in the ring)
};
static_assert(sizeof(frame_header) == 32);

// "TLN3": version 2 ended the handshake with the server's same-host socket name, version 3
// shares rings on a same-host socket (lane_ring.hpp); a peer of another version is refused at
// its first word rather than misreading what follows.
constexpr uint32_t frame_magic = 0x334e4c54;

// An open socket; closed when the last owner goes. shutdown() wakes a blocked reader.
class socket_fd {
 public:
  explicit socket_fd(int fd) : fd_(fd) {}
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  ~socket_fd();
  int get() const { return fd_; }
  void shutdown() const;

 private:
  int fd_;
};

// Writes the header and payload in one call (writev), bounded by the socket's send timeout. A
// header marked in_ring is written alone (its payload is in the ring already).
caf::error write_frame(const socket_fd& s, frame_header h, const char* payload);
// The same with the payload in parts (h.size is their total), in one scatter-gather write.
caf::error write_frame(const socket_fd& s, frame_header h, byte_parts payload);
// The frame's bytes from offset `from` on (of the header, then the payload). With `wait`, all of
// them (as write_frame); without, only what the socket takes at once, never waiting. Returns
// how far the frame is written (header included).
caf::expected<size_t> write_frame_from(const socket_fd& s, frame_header h, byte_parts payload,
                                       size_t from, bool wait);
// One frame of several written together.
struct frame_out {
  frame_header header;
  byte_parts payload;
};
// The same for frames written one after the other in one scatter-gather write; `from` and the
// result count over all of them.
caf::expected<size_t> write_frames_from(const socket_fd& s, std::span<frame_out> frames,
                                        size_t from, bool wait);

// errc::io_failure naming the call `what` that failed, with errno's text.
caf::error io_error(const char* what);
// Waits until fd is readable (POLLIN) or writable (POLLOUT) for at most `timeout`;
// errc::timeout ("the peer went quiet") when it is not.
caf::error await(int fd, short events, std::chrono::milliseconds timeout);

// Reads exactly n bytes, each wait bounded by `timeout`.
caf::error read_exact(int fd, char* out, size_t n, std::chrono::milliseconds timeout);

// Waits at most `timeout` for the socket to have bytes to read (or to end, which the next read
// reports): true when it has, false when the time passed. An error only when poll fails.
caf::expected<bool> readable(int fd, std::chrono::milliseconds timeout);
inline caf::expected<bool> readable(const socket_fd& s, std::chrono::milliseconds timeout) {
  return readable(s.get(), timeout);
}

// Reads a lane's frames through a buffer of its own. One recv takes whatever has arrived (a
// pair's two frames, an ack and the values behind it, the header of a payload in the ring),
// where reading each header and each small payload on its own cost a poll and a recv apiece:
// about ten system calls per pair of frames. A payload larger than the buffer is read straight
// into its place. Used by one reading thread per lane (lane_server's reader, lane_client's),
// and by tests that play one end of a lane.
class frame_reader {
 public:
  explicit frame_reader(const socket_fd& s) : fd_(s.get()), buffer_(buffer_bytes) {}

  // True at once when bytes of a frame are buffered; else as lane::readable.
  caf::expected<bool> readable(std::chrono::milliseconds timeout);

  // Reads the next frame: waits without bound for its first byte (until shutdown), then with
  // `timeout` for the rest. A payload in the ring is taken from `ring` (the peer's; none: such
  // a frame is refused), or lent where it is into `*lent` when given (shared_ring::lend).
  // Refuses a bad magic, an unknown kind or an oversized payload.
  caf::error read(std::chrono::milliseconds timeout, frame_header& h, wire_bytes& payload,
                  shared_ring* ring = nullptr,
                  std::shared_ptr<const borrowed_bytes>* lent = nullptr);

 private:
  // Room for a burst of small frames (headers, pull requests, acks): a larger payload is read
  // straight into its place after what the buffer took of it (with 64 KiB here, 64 KiB rounds
  // copied most of each payload once more).
  static constexpr size_t buffer_bytes = size_t{4} << 10;
  // Reads what the socket has into the (empty) buffer, at least one byte: waiting without
  // bound when `forever`, else at most `timeout`.
  caf::error fill(std::chrono::milliseconds timeout, bool forever);
  // The next n bytes into `out`: what is buffered, then from the socket.
  caf::error take(char* out, size_t n, std::chrono::milliseconds timeout);

  int fd_;
  std::vector<char> buffer_;
  size_t begin_ = 0;  // buffer_[begin_, end_) is read and not yet taken
  size_t end_ = 0;
};

// Listens on host:port (0: any free port) for lanes; returns the socket and the bound port.
caf::expected<std::pair<int, uint16_t>> listen_on(const std::string& host, uint16_t port);

// A lane's client end after the handshake: the socket, the text of the server's CAF node id,
// the name of the server's same-host socket (empty when it has none), and on that socket the
// rings both ends share (lane_ring.hpp).
struct lane_peer {
  int fd = -1;
  std::string node;
  std::string local_name;
  ring_pair rings;
};

// Connects to host:port within `timeout` and proves the secret (the node side of the
// handshake).
caf::expected<lane_peer> connect_lane(const std::string& host, uint16_t port,
                                      const std::string& secret, std::chrono::milliseconds timeout);

// Same-host lanes. A server also listens on an abstract Unix socket with a random name and
// tells every client that name at the end of the handshake; a client that can reach it (the
// same host and network namespace: abstract names belong to a namespace) and finds the same
// node behind it moves there. A Unix socket moves a frame with one copy each way and none of
// TCP's work (the pushpull suite prints both beside their raw peers); connect_local also
// shares rings with the server (share_rings), which carry large payloads with no kernel copy.
caf::expected<std::pair<int, std::string>> listen_local();  // the socket and its name
caf::expected<int> dial_local(const std::string& name, std::chrono::milliseconds timeout);
caf::expected<lane_peer> connect_local(const std::string& name, const std::string& secret,
                                       std::chrono::milliseconds timeout);

// The server side of the handshake on an accepted socket: errc::authentication_failed when the
// peer does not know the secret. `node` is this node's CAF node id and `local_name` its
// same-host socket's name (empty: none), both sent to the client.
caf::error accept_lane(const socket_fd& s, const std::string& secret, const std::string& node,
                       const std::string& local_name, std::chrono::milliseconds timeout);

// How often a lane's deadlines are checked (its client's reader, its server's session): a
// quarter of the timeout, so that a request nobody answers fails between 1 and 1.25 timeouts
// after it was written. One check per period instead of one CAF timer per request, each of
// which wakes the clock thread twice.
inline std::chrono::milliseconds sweep_period(std::chrono::milliseconds timeout) {
  return std::max(timeout / 4, std::chrono::milliseconds{1});
}

// Sets the socket's send and receive timeouts, and TCP_NODELAY on a TCP socket. A Unix socket
// gets send and receive buffers of 4 MiB (as far as net.core.wmem_max and rmem_max allow):
// with the default 208 KiB a writer waits for the reader every few pages, and a Unix lane ran
// slower than TCP.
void tune(int fd, std::chrono::milliseconds timeout);

// Names the calling thread (at most 15 characters), so that top and perf show lane threads.
void name_thread(const char* name);

}  // namespace troupe::lane
