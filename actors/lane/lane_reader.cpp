#include "actors/lane/lane_reader.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "troupe/error.hpp"

namespace troupe::lane {

namespace {

bool known_kind(uint8_t k) {
  return k >= static_cast<uint8_t>(frame_kind::push) && k <= static_cast<uint8_t>(frame_kind::gone);
}

}  // namespace

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

}  // namespace troupe::lane
