#include "actors/transport/lane_ring.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "actors/transport/lane_socket.hpp"
#include "troupe/error.hpp"

namespace troupe::lane {

namespace {

constexpr size_t page = 4096;                         // the counters' page, before the data
constexpr size_t max_ring_bytes = size_t{256} << 20;  // the most a peer's offer may map
constexpr int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

caf::error ring_error(const std::string& what) {
  return make_error(errc::io_failure, "data lane ring: " + what + ": " + std::strerror(errno));
}

caf::error broken_exchange(const std::string& what) {
  return make_error(errc::malformed_message, "data lane ring: " + what);
}

}  // namespace

struct shared_ring::control {
  alignas(64) std::atomic<uint64_t> written{0};   // the writer's: the end of what it put
  alignas(64) std::atomic<uint64_t> released{0};  // the reader's: the end of what it took
};
static_assert(sizeof(shared_ring::control) <= page);
static_assert(std::atomic<uint64_t>::is_always_lock_free);  // shared between processes

shared_ring::shared_ring(int fd, char* base, size_t capacity)
    : fd_(fd), base_(base), capacity_(capacity) {}

shared_ring::~shared_ring() {
  ::munmap(base_, page + capacity_);
  ::close(fd_);
}

shared_ring::control& shared_ring::shared() const {
  return *std::launder(reinterpret_cast<control*>(base_));
}

caf::expected<std::unique_ptr<shared_ring>> shared_ring::mapped(int fd, size_t capacity) {
  void* base = ::mmap(nullptr, page + capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    auto err = ring_error("mmap");
    ::close(fd);
    return err;
  }
  return std::unique_ptr<shared_ring>(new shared_ring(fd, static_cast<char*>(base), capacity));
}

caf::expected<std::unique_ptr<shared_ring>> shared_ring::create(size_t capacity) {
  if (capacity == 0 || capacity % page != 0 || capacity > max_ring_bytes)
    return make_error(errc::bad_configuration, "data lane ring: a capacity of whole pages");
  const int fd = ::memfd_create("troupe-lane-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return ring_error("memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(page + capacity)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, seals) != 0) {
    auto err = ring_error("sizing and sealing");
    ::close(fd);
    return err;
  }
  auto ring = mapped(fd, capacity);
  if (ring) new ((*ring)->base_) control{};
  return ring;
}

caf::expected<std::unique_ptr<shared_ring>> shared_ring::map(int fd, size_t capacity) {
  struct stat st {};
  const int sealed = ::fcntl(fd, F_GET_SEALS);
  caf::error refused;
  if (capacity == 0 || capacity % page != 0 || capacity > max_ring_bytes)
    refused = broken_exchange("an offer of " + std::to_string(capacity) + " bytes");
  else if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || size_t(st.st_size) != page + capacity)
    refused = broken_exchange("the offered memory is not of the size offered");
  else if (sealed < 0 || (sealed & seals) != seals)
    refused = broken_exchange("the offered memory is not sealed against resizing");
  if (refused) {
    ::close(fd);
    return refused;
  }
  return mapped(fd, capacity);
}

uint64_t shared_ring::start_of(uint64_t from, size_t size) const {
  const uint64_t offset = from % capacity_;
  return offset + size > capacity_ ? from + (capacity_ - offset) : from;
}

bool shared_ring::put(byte_parts payload, size_t size) {
  if (size == 0 || size > capacity_) return false;
  const uint64_t start = start_of(next_, size);
  const uint64_t end = start + size;
  // What the reader has not taken yet (a reader that wrote nonsense only loses its ring).
  if (end - shared().released.load(std::memory_order_acquire) > capacity_) return false;
  char* to = base_ + page + start % capacity_;
  size_t copied = 0;
  for (const auto& part : payload) {
    if (part.size() > size - copied) return false;  // parts longer than size: nothing published
    std::memcpy(to + copied, part.data(), part.size());
    copied += part.size();
  }
  if (copied != size) return false;
  next_ = end;
  shared().written.store(end, std::memory_order_release);
  return true;
}

caf::expected<uint64_t> shared_ring::next_payload(size_t size) {
  if (size == 0 || size > capacity_)
    return broken_exchange("a payload of " + std::to_string(size) + " bytes in a ring of " +
                           std::to_string(capacity_));
  const uint64_t start = start_of(next_, size);
  const uint64_t end = start + size;
  const uint64_t written = shared().written.load(std::memory_order_acquire);
  if (end > written || written - next_ > capacity_)
    return broken_exchange("a frame names bytes its ring does not hold");
  next_ = end;
  return start;
}

caf::error shared_ring::take(size_t size, wire_bytes& out) {
  auto start = next_payload(size);
  if (!start) return std::move(start.error());
  out.resize(size);
  std::memcpy(out.data(), base_ + page + *start % capacity_, size);
  give_back(*start + size, false);
  return {};
}

// A payload lent where it is; letting go of it frees its place.
struct shared_ring::loan : borrowed_bytes {
  loan(std::shared_ptr<shared_ring> ring, std::span<const char> where, uint64_t end)
      : ring(std::move(ring)), end(end) {
    bytes = where;
  }
  ~loan() override { ring->give_back(end, true); }
  std::shared_ptr<shared_ring> ring;  // keeps the mapping while the bytes are read
  uint64_t end;
};

caf::expected<std::shared_ptr<const borrowed_bytes>> shared_ring::lend(size_t size) {
  auto start = next_payload(size);
  if (!start) return std::move(start.error());
  const uint64_t end = *start + size;
  {
    std::lock_guard<std::mutex> lock{lent_mutex_};
    taken_.emplace_back(end, false);
  }
  const std::span<const char> where{base_ + page + *start % capacity_, size};
  return std::make_shared<const loan>(shared_from_this(), where, end);
}

void shared_ring::give_back(uint64_t end, bool lent) {
  std::lock_guard<std::mutex> lock{lent_mutex_};
  if (!lent && taken_.empty()) {  // nothing lent before it: freed at once
    shared().released.store(end, std::memory_order_release);
    return;
  }
  if (!lent)
    taken_.emplace_back(end, true);
  else
    for (auto& [e, done] : taken_)
      if (e == end) done = true;
  uint64_t released = 0;
  while (!taken_.empty() && taken_.front().second) {
    released = taken_.front().first;
    taken_.pop_front();
  }
  if (released) shared().released.store(released, std::memory_order_release);
}

namespace {

// One end's offer: its ring's capacity (0: none), with the ring's fd attached.
caf::error send_offer(int s, const shared_ring* ring) {
  uint64_t capacity = ring ? ring->capacity() : 0;
  iovec data{&capacity, sizeof capacity};
  msghdr msg{};
  msg.msg_iov = &data;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (ring) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    const int fd = ring->fd();
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  if (::sendmsg(s, &msg, MSG_NOSIGNAL) != ssize_t(sizeof capacity))
    return ring_error("sending the offer");
  return {};
}

// Any fds a message carried, closed but for the first, which is returned (-1: none).
int first_fd_of(msghdr& msg) {
  int kept = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (kept < 0)
        kept = fd;
      else
        ::close(fd);
    }
  }
  return kept;
}

// The peer's offer: its capacity and the fd that came with it (-1: none).
caf::error read_offer(int s, std::chrono::milliseconds timeout, uint64_t& capacity, int& fd) {
  fd = -1;
  char bytes[sizeof capacity];
  size_t got = 0;
  while (got < sizeof bytes) {
    auto ready = readable(s, timeout);
    if (!ready) return std::move(ready.error());
    if (!*ready) return make_error(errc::timeout, "data lane ring: no offer from the peer");
    iovec data{bytes + got, sizeof bytes - got};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &data;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t r = ::recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
    if (r == 0) return broken_exchange("the peer closed the connection");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ring_error("reading the offer");
    }
    const int arrived = first_fd_of(msg);
    if (arrived >= 0 && fd >= 0) ::close(arrived);
    if (arrived >= 0 && fd < 0) fd = arrived;
    got += size_t(r);
  }
  std::memcpy(&capacity, bytes, sizeof capacity);
  return {};
}

}  // namespace

caf::expected<ring_pair> share_rings(int s, size_t capacity, std::chrono::milliseconds timeout) {
  ring_pair rings;
  if (auto made = shared_ring::create(capacity)) rings.out = std::move(*made);
  if (auto err = send_offer(s, rings.out.get())) return err;
  uint64_t offered = 0;
  int fd = -1;
  if (auto err = read_offer(s, timeout, offered, fd)) {
    if (fd >= 0) ::close(fd);
    return err;
  }
  if (offered != 0 && fd >= 0) {
    if (auto mapped = shared_ring::map(fd, offered)) rings.in = std::move(*mapped);
  } else if (fd >= 0) {
    ::close(fd);
  }
  // Each end says whether it holds the peer's ring: a ring is written only when it is read.
  const char held = rings.in ? 1 : 0;
  if (::send(s, &held, 1, MSG_NOSIGNAL) != 1) return ring_error("sending the answer");
  char peer_held = 0;
  auto ready = readable(s, timeout);
  if (!ready) return std::move(ready.error());
  if (!*ready || ::recv(s, &peer_held, 1, 0) != 1) return broken_exchange("no answer to our offer");
  if (peer_held != 1) rings.out.reset();
  return rings;
}

}  // namespace troupe::lane
