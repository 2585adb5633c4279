// The shared rings beside a same-host data lane (actors/transport/lane_ring.hpp): payloads come out
// as they went in, in order, across the ring's end; a full ring refuses (the frame then goes
// on the socket) until its reader takes; a lent payload keeps its place until it and every
// loan before it is let go; a reader refuses a frame its writer never put; a
// peer's memory that is not sealed or not of the offered size is not mapped; and two ends of a
// Unix socket share rings both ways, or none where the peer offers none.
#define BOOST_TEST_MODULE lane_ring
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>
#include <vector>

#include "actors/transport/lane_ring.hpp"
#include "expect_error.hpp"

using namespace troupe;
using troupe::testing::fails_with;
using troupe::testing::is_error;
using troupe::testing::succeeded;

namespace {

constexpr size_t capacity = 64 << 10;
constexpr auto timeout = std::chrono::seconds(10);

std::vector<char> pattern(size_t n, char seed) {
  std::vector<char> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(seed + i * 7);
  return out;
}

bool put_whole(lane::shared_ring& ring, const std::vector<char>& bytes) {
  const std::span<const char> whole{bytes.data(), bytes.size()};
  return ring.put(byte_parts{&whole, 1}, bytes.size());
}

// A writer's ring and the reader's mapping of the same memory (as a peer maps it).
struct ring_ends {
  ring_ends() {
    auto made = lane::shared_ring::create(capacity);
    BOOST_TEST_REQUIRE(succeeded(made));
    writer = std::move(*made);
    auto mapped = lane::shared_ring::map(::dup(writer->fd()), capacity);
    BOOST_TEST_REQUIRE(succeeded(mapped));
    reader = std::move(*mapped);
  }
  std::unique_ptr<lane::shared_ring> writer, reader;
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(payloads_come_out_in_order_across_the_end, ring_ends) {
  // Three 24 KiB payloads do not fit before the end of 64 KiB: the third starts over.
  for (int round = 0; round < 10; ++round) {
    std::vector<std::vector<char>> sent;
    for (char seed : {'a', 'b', 'c'}) {
      sent.push_back(pattern(24 << 10, static_cast<char>(seed + round)));
      if (seed == 'c') {
        // Two halves: parts are written one after the other.
        const std::span<const char> halves[2] = {{sent.back().data(), 10000},
                                                 {sent.back().data() + 10000, (24 << 10) - 10000}};
        BOOST_TEST_REQUIRE(writer->put(byte_parts{halves, 2}, sent.back().size()));
      } else {
        BOOST_TEST_REQUIRE(put_whole(*writer, sent.back()));
      }
      wire_bytes got;
      BOOST_TEST_REQUIRE(!reader->take(sent.back().size(), got));
      BOOST_TEST(std::equal(got.begin(), got.end(), sent.back().begin(), sent.back().end()));
    }
  }
}

BOOST_FIXTURE_TEST_CASE(a_full_ring_refuses_until_its_reader_takes, ring_ends) {
  const auto a = pattern(40 << 10, 'a');
  const auto b = pattern(30 << 10, 'b');
  BOOST_TEST_REQUIRE(put_whole(*writer, a));
  BOOST_TEST(!put_whole(*writer, b));                           // 40 + 30 KiB > 64 KiB: not now
  BOOST_TEST(!put_whole(*writer, pattern(capacity + 1, 'x')));  // never: larger than the ring
  // A refused put changed nothing: the reader still finds `a` first.
  wire_bytes got;
  BOOST_TEST_REQUIRE(!reader->take(a.size(), got));
  BOOST_TEST(std::equal(got.begin(), got.end(), a.begin(), a.end()));
  BOOST_TEST_REQUIRE(put_whole(*writer, b));
  BOOST_TEST_REQUIRE(!reader->take(b.size(), got));
  BOOST_TEST(std::equal(got.begin(), got.end(), b.begin(), b.end()));
}

BOOST_AUTO_TEST_CASE(a_lent_payload_keeps_its_place_until_every_loan_before_it_is_let_go) {
  auto made = lane::shared_ring::create(capacity);
  BOOST_TEST_REQUIRE(succeeded(made));
  std::unique_ptr<lane::shared_ring> writer = std::move(*made);
  auto mapped = lane::shared_ring::map(::dup(writer->fd()), capacity);
  BOOST_TEST_REQUIRE(succeeded(mapped));
  std::shared_ptr<lane::shared_ring> reader = std::move(*mapped);
  const auto a = pattern(20 << 10, 'a');
  const auto b = pattern(20 << 10, 'b');
  BOOST_TEST_REQUIRE(put_whole(*writer, a));
  BOOST_TEST_REQUIRE(put_whole(*writer, b));
  auto first = reader->lend(a.size());
  auto second = reader->lend(b.size());
  BOOST_TEST_REQUIRE(succeeded(first));
  BOOST_TEST_REQUIRE(succeeded(second));
  BOOST_TEST(std::equal(a.begin(), a.end(), (*first)->bytes.begin(), (*first)->bytes.end()));
  BOOST_TEST(std::equal(b.begin(), b.end(), (*second)->bytes.begin(), (*second)->bytes.end()));
  const auto c = pattern(30 << 10, 'c');
  BOOST_TEST(!put_whole(*writer, c));  // 40 KiB lent: no room for 30 more
  second->reset();                     // let go out of order: `first` still holds the front
  BOOST_TEST(!put_whole(*writer, c));
  // A copy taken meanwhile is freed with the loans before it.
  BOOST_TEST_REQUIRE(put_whole(*writer, pattern(4 << 10, 'd')));
  wire_bytes got;
  BOOST_TEST_REQUIRE(!reader->take(4 << 10, got));
  first->reset();  // everything taken is free now
  BOOST_TEST(put_whole(*writer, c));
  // The ring outlives its reader's handle while a loan holds it.
  auto last = reader->lend(c.size());
  BOOST_TEST_REQUIRE(succeeded(last));
  reader.reset();
  BOOST_TEST(std::equal(c.begin(), c.end(), (*last)->bytes.begin(), (*last)->bytes.end()));
}

BOOST_FIXTURE_TEST_CASE(a_frame_its_writer_never_put_is_refused, ring_ends) {
  wire_bytes got;
  BOOST_TEST(is_error(reader->take(1000, got), errc::malformed_message));
  BOOST_TEST(is_error(reader->take(capacity + 1, got), errc::malformed_message));
  BOOST_TEST_REQUIRE(put_whole(*writer, pattern(20000, 'z')));
  BOOST_TEST(is_error(reader->take(30000, got), errc::malformed_message));  // longer than put
  BOOST_TEST(!reader->take(20000, got));  // the refusals took nothing
}

BOOST_AUTO_TEST_CASE(memory_that_is_not_sealed_or_not_of_the_offered_size_is_not_mapped) {
  auto made = lane::shared_ring::create(capacity);
  BOOST_TEST_REQUIRE(succeeded(made));
  BOOST_TEST(fails_with(lane::shared_ring::map(::dup((*made)->fd()), 2 * capacity),
                        errc::malformed_message));
  BOOST_TEST(fails_with(lane::shared_ring::map(::dup((*made)->fd()), capacity + 1),
                        errc::malformed_message));
  const int unsealed = ::memfd_create("unsealed", MFD_CLOEXEC);
  BOOST_TEST_REQUIRE(unsealed >= 0);
  BOOST_TEST_REQUIRE(::ftruncate(unsealed, 4096 + capacity) == 0);
  BOOST_TEST(fails_with(lane::shared_ring::map(unsealed, capacity), errc::malformed_message));
  int pipe_fds[2];
  BOOST_TEST_REQUIRE(::pipe(pipe_fds) == 0);
  ::close(pipe_fds[1]);
  BOOST_TEST(fails_with(lane::shared_ring::map(pipe_fds[0], capacity), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(two_ends_of_a_unix_socket_share_rings_both_ways) {
  int fds[2];
  BOOST_TEST_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  auto other =
      std::async(std::launch::async, [&] { return lane::share_rings(fds[1], capacity, timeout); });
  auto ours = lane::share_rings(fds[0], capacity, timeout);
  auto theirs = other.get();
  BOOST_TEST_REQUIRE(succeeded(ours));
  BOOST_TEST_REQUIRE(succeeded(theirs));
  BOOST_TEST_REQUIRE((ours->out && ours->in && theirs->out && theirs->in));
  const auto there = pattern(50000, 'q');
  const auto back = pattern(30000, 'r');
  BOOST_TEST_REQUIRE(put_whole(*ours->out, there));
  BOOST_TEST_REQUIRE(put_whole(*theirs->out, back));
  wire_bytes got;
  BOOST_TEST_REQUIRE(!theirs->in->take(there.size(), got));
  BOOST_TEST(std::equal(got.begin(), got.end(), there.begin(), there.end()));
  BOOST_TEST_REQUIRE(!ours->in->take(back.size(), got));
  BOOST_TEST(std::equal(got.begin(), got.end(), back.begin(), back.end()));
  ::close(fds[0]);
  ::close(fds[1]);
}

BOOST_AUTO_TEST_CASE(a_peer_that_offers_no_ring_gets_none_and_ours_goes_unused) {
  int fds[2];
  BOOST_TEST_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  // The peer offers capacity 0 with no memory, and answers that it did not map ours.
  auto peer = std::async(std::launch::async, [&] {
    const uint64_t none = 0;
    if (::send(fds[1], &none, sizeof none, MSG_NOSIGNAL) != ssize_t(sizeof none)) return false;
    char sink[8];
    if (::recv(fds[1], sink, sizeof sink, MSG_WAITALL) != ssize_t(sizeof sink)) return false;
    const char held = 0;
    if (::send(fds[1], &held, 1, MSG_NOSIGNAL) != 1) return false;
    return ::recv(fds[1], sink, 1, 0) == 1;
  });
  auto ours = lane::share_rings(fds[0], capacity, timeout);
  BOOST_TEST(peer.get());
  BOOST_TEST_REQUIRE(succeeded(ours));
  BOOST_TEST(!ours->in);
  BOOST_TEST(!ours->out);
  ::close(fds[0]);
  ::close(fds[1]);
}

BOOST_AUTO_TEST_CASE(a_peer_that_never_answers_is_an_error_in_bounded_time) {
  int fds[2];
  BOOST_TEST_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  BOOST_TEST(!succeeded(lane::share_rings(fds[0], capacity, std::chrono::milliseconds(100))));
  ::close(fds[0]);
  ::close(fds[1]);
}
