// lane_ring: shared memory beside a same-host data lane (lane_socket.hpp). Each end of a lane on
// a Unix socket writes the large payloads of its frames into a ring of its own, a sealed memfd
// the other end maps, and sends only the frame's header on the socket, marked in_ring. Writers
// encode straight into it (a worker's push from its gradient, a bucket's pull reply from its
// slices). The server copies a request out of the ring before a bucket reads it (take: nothing
// the client changes later can reach a check); the client lends an answer where it is (lend)
// and decodes it into the worker's parameters. Both ends place payloads in frame order with
// the same rule, so a header needs no offset.
//
// Why: a Unix socket copies every byte twice inside the kernel, with its buffer allocations
// (about 0.26 CPU-s per GB moved here, against 0.045 for two copies through a warm ring). In
// the five-process fmnist job, which moves about 5 GB, the rings took 6-7% off its CPU and wall
// time (medians of alternating runs), and encoding the replies into them about 5% more of the
// servers' CPU. A ring larger than the cache hurt: with 8 MiB, 1 MiB rounds ran at half the
// speed of 2-4 MiB rings.
//
// A payload that does not fit (the reader is behind, or it is larger than the ring) goes on the
// socket as before: the ring never makes a writer wait. Used by lane_client and lane_server
// only; put() by one writing thread at a time, take() by the lane's one reader thread.
#pragma once

#include <caf/expected.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include "messages/codec.hpp"

namespace troupe::lane {

// A ring's data bytes (a lane's memory is twice this, one ring each way), and the smallest
// payload that goes through it: below that the socket did better (64 KiB pushpull rounds ran
// at 0.70-0.76 of a raw Unix socket on it, 0.30-0.38 through the ring).
constexpr size_t ring_bytes = size_t{4} << 20;
constexpr size_t ring_min_payload = size_t{128} << 10;

class shared_ring : public std::enable_shared_from_this<shared_ring> {
 public:
  // A new ring of `capacity` data bytes (a multiple of the page size), sealed against resizing.
  static caf::expected<std::unique_ptr<shared_ring>> create(size_t capacity);
  // Maps the ring a peer sent as `fd` (taken over), which must be sealed and of the size that
  // `capacity` gives.
  static caf::expected<std::unique_ptr<shared_ring>> map(int fd, size_t capacity);
  shared_ring(const shared_ring&) = delete;
  shared_ring& operator=(const shared_ring&) = delete;
  ~shared_ring();

  int fd() const { return fd_; }
  size_t capacity() const { return capacity_; }

  // Writer: copies the `size` bytes of `payload` into the ring; false (nothing written) when
  // they do not fit now.
  bool put(byte_parts payload, size_t size);
  // Reader: copies the next payload, of `size` bytes, into `out` and frees its place;
  // errc::malformed_message when the writer has not put that much.
  caf::error take(size_t size, wire_bytes& out);
  // Reader: lends the next payload where it is, its place freed once the loan (and every
  // earlier one) is let go, on any thread. Call it on a ring held by a shared_ptr. For a
  // payload read once as it is decoded (a pull's values, copied out as they are checked):
  // a writer that changed it meanwhile would change only what it sent.
  caf::expected<std::shared_ptr<const borrowed_bytes>> lend(size_t size);

  struct control;  // the shared counters at the start of the mapping (lane_ring.cpp)

 private:
  shared_ring(int fd, char* base, size_t capacity);
  // Maps `fd` (taken over: closed on failure) as a ring of `capacity` data bytes.
  static caf::expected<std::unique_ptr<shared_ring>> mapped(int fd, size_t capacity);
  control& shared() const;
  // Where a payload of `size` bytes that follows position `from` begins (it never wraps: one
  // that would is moved to the ring's start).
  uint64_t start_of(uint64_t from, size_t size) const;

  // Reader: where the next payload of `size` bytes lies; errc::malformed_message when the
  // writer has not put it. Moves next_ past it.
  caf::expected<uint64_t> next_payload(size_t size);
  // Reader: the payload ending at `end` is done with; frees what is done from the front on.
  void give_back(uint64_t end, bool lent);
  struct loan;  // what lend() hands out (lane_ring.cpp)

  int fd_;
  char* base_;  // the mapping: a page of counters, then the data
  size_t capacity_;
  uint64_t next_ = 0;  // the writer's end of what it put, or the reader's end of what it took
  // Reader: the ends of the payloads taken and not yet freed, in order, each with whether it
  // is done (a loan let go); the shared `released` counter moves past the done front.
  std::mutex lent_mutex_;
  std::deque<std::pair<uint64_t, bool>> taken_;
};

// Both ends' rings for one same-host lane, either of which may be missing: `out` is ours to
// put into (the peer took it), `in` the peer's that we take from (shared with its loans).
struct ring_pair {
  std::unique_ptr<shared_ring> out;
  std::shared_ptr<shared_ring> in;
};

// Right after the handshake on a Unix socket `socket`, both ends run this: each offers a ring of
// `capacity` (with its fd, SCM_RIGHTS), maps the peer's and says whether it did, so that a ring
// is only used when its reader holds it. A ring that cannot be made or mapped is simply not
// used; an error only when the socket fails or the peer breaks the exchange.
caf::expected<ring_pair> share_rings(int socket, size_t capacity,
                                     std::chrono::milliseconds timeout);

}  // namespace troupe::lane
