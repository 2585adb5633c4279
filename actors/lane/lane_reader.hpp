// lane_reader: reads a data lane's frames (lane_socket.hpp) through a buffer of its own. One
// recv takes whatever has arrived (a pair's two frames, an ack and the values behind it, the
// header of a payload in the ring), where reading each header and each small payload on its
// own cost a poll and a recv apiece: about ten system calls per pair of frames. A payload
// larger than the buffer is read straight into its place. Used by one reading thread per lane
// (lane_server's reader, lane_client's), and by tests that play one end of a lane.
#pragma once

#include <caf/expected.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include "actors/lane/lane_socket.hpp"

namespace troupe::lane {

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

}  // namespace troupe::lane
