// The data lane (actors/lane) on loopback and on its same-host Unix socket, against a real
// bucket: pushes and pulls over either are answered exactly as over CAF (values, acks,
// refusals), a client on the same host moves to the Unix socket and sends large payloads
// through the rings it shares with the server, a wrong secret is refused, an
// unknown bucket or a lost connection comes back as a "gone" error the worker resends on, a
// request nobody answers fails once the lane's timeout has passed (on the client, and on the
// server for a frame its bucket holds too long), a push paired with its pull is answered
// together with it (and alone when no pull follows or the pull is late), and an oversized or
// garbled frame ends the connection without harming the bucket.
#define BOOST_TEST_MODULE lane
#include <boost/test/unit_test.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <optional>
#include <thread>

#include "actors/transport/bucket_channel.hpp"
#include "actors/transport/lane_client.hpp"
#include "actors/transport/lane_server.hpp"
#include "actors/transport/lane_socket.hpp"
#include "tests/integration/bucket_fixture.hpp"
#include "tests/support/progress.hpp"
#include "tests/unit/expect_error.hpp"

using namespace troupe;
using troupe::testing::bucket_actor_fixture;
using troupe::testing::fails_with;
using troupe::testing::push_for;

namespace {

// Writes a request for the bucket of actor id `target` straight onto `link` (as a lane's
// bucket_channel does) and waits for its answer.
caf::expected<wire> ask_lane(caf::scoped_actor& self, lane_link& link, lane::frame_kind kind,
                             uint64_t target, const wire& w) {
  const auto id = self->new_request_id(caf::message_priority::normal);
  const std::span<const char> whole{w.bytes.data(), w.bytes.size()};
  link.send(self->ctrl(), id, kind, target, byte_parts{&whole, 1});
  caf::expected<wire> result = make_error(errc::timeout);
  answer_to(self.ptr(), id.response_id())
      .receive([&](const wire& reply) { result = reply; },
               [&](caf::error& err) { result = std::move(err); });
  return result;
}

constexpr auto timeout = std::chrono::seconds(10);
const std::string secret = "lane-test-secret-0123456789";

// The fixture's bucket behind a listener on loopback, and one client lane to it: over the
// listener's same-host Unix socket, or (tcp_lane_fixture) over TCP.
struct lane_fixture : bucket_actor_fixture {
  explicit lane_fixture(bool same_host = true) {
    auto started = lane_listener::start(
        sys,
        lane_listener_config{"127.0.0.1", 0, secret, timeout, logger{"lane", log_level::error}});
    BOOST_TEST_REQUIRE(testing::succeeded(started));
    listener = std::move(*started);
    listener->enroll(bucket);
    auto opened = lane_link::open("127.0.0.1", listener->port(), secret, timeout, same_host);
    BOOST_TEST_REQUIRE(testing::succeeded(opened));
    lane = std::move(*opened);
  }
  ~lane_fixture() {
    lane.reset();
    listener->stop();
  }

  template <class Atom>
  caf::expected<wire> over_lane(Atom, const wire& w, uint64_t target) {
    constexpr auto kind =
        std::is_same<Atom, push_atom>::value ? lane::frame_kind::push : lane::frame_kind::pull;
    return ask_lane(self, *lane, kind, target, w);
  }
  template <class Atom>
  caf::expected<wire> over_caf(Atom atom, const wire& w) {
    caf::expected<wire> result = make_error(errc::timeout);
    self->request(bucket, timeout, atom, w)
        .receive([&](const wire& reply) { result = reply; },
                 [&](caf::error& err) { result = std::move(err); });
    return result;
  }

  std::shared_ptr<lane_listener> listener;
  std::shared_ptr<lane_link> lane;
};

struct tcp_lane_fixture : lane_fixture {
  tcp_lane_fixture() : lane_fixture(false) {}
};

// A reply's bytes, wherever the lane left them (a large one is lent from the shared ring).
wire_bytes bytes(const wire& w) {
  const auto b = bytes_of(w);
  return wire_bytes(b.begin(), b.end());
}

bool is_gone(const caf::expected<wire>& result) {
  return !result && result.error().category() != error_category;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_lane_on_one_host_moves_to_the_unix_socket, lane_fixture) {
  BOOST_TEST(!listener->local_name().empty());
  BOOST_TEST(lane->local());
  BOOST_TEST(lane->node() == to_string(sys.node()));
  // The same-host socket asks for the secret as TCP does.
  BOOST_TEST(
      fails_with(lane::connect_local(listener->local_name(), "wrong-secret-0123456789", timeout),
                 errc::authentication_failed));
  BOOST_TEST(!testing::succeeded(lane::connect_local("troupe-lane-nobody", secret, timeout)));
  auto tcp = lane_link::open("127.0.0.1", listener->port(), secret, timeout, false);
  BOOST_TEST_REQUIRE(testing::succeeded(tcp));
  BOOST_TEST(!(*tcp)->local());
}

BOOST_AUTO_TEST_CASE(a_listener_without_a_unix_socket_keeps_its_clients_on_tcp) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  lane_listener_config config{"127.0.0.1", 0, secret, timeout, logger{"lane", log_level::error}};
  config.same_host = false;
  auto listener = lane_listener::start(sys, config);
  BOOST_TEST_REQUIRE(testing::succeeded(listener));
  BOOST_TEST((*listener)->local_name().empty());
  auto opened = lane_link::open("127.0.0.1", (*listener)->port(), secret, timeout);
  BOOST_TEST_REQUIRE(testing::succeeded(opened));
  BOOST_TEST(!(*opened)->local());
  (*listener)->stop();
}

// Both transports answer alike.
void check_answers(lane_fixture& f);

BOOST_FIXTURE_TEST_CASE(a_lane_answers_as_the_bucket_does_over_caf, lane_fixture) {
  check_answers(*this);
}

BOOST_FIXTURE_TEST_CASE(a_tcp_lane_answers_as_the_bucket_does_over_caf, tcp_lane_fixture) {
  check_answers(*this);
}

void check_answers(lane_fixture& f) {
  BOOST_TEST(f.lane->node() == to_string(f.sys.node()));
  const auto push = push_for(f.spec, 0, 1.0f);
  auto ack = f.over_lane(push_atom_v, encode(push), f.bucket.id());
  BOOST_TEST_REQUIRE(testing::succeeded(ack));
  auto decoded_ack = decode<push_ack>(*ack);
  BOOST_TEST_REQUIRE(testing::succeeded(decoded_ack));
  BOOST_TEST(decoded_ack->version == 1u);

  auto via_lane = f.over_lane(pull_atom_v, encode(pull_request{7, 0, 0, {}}), f.bucket.id());
  auto via_caf = f.over_caf(pull_atom_v, encode(pull_request{7, 1, 0, {}}));
  BOOST_TEST_REQUIRE(testing::succeeded(via_lane));
  BOOST_TEST_REQUIRE(testing::succeeded(via_caf));
  BOOST_TEST(bytes(*via_lane) == via_caf->bytes, boost::test_tools::per_element());

  // Refusals keep their troupe code, and the values stay as they were.
  auto with_nan = push_for(f.spec, 0, 1.0f);
  with_nan.dense[1].values[1] = std::numeric_limits<float>::quiet_NaN();
  auto wrong_shape = push_for(f.spec, 0, 1.0f);
  wrong_shape.dense[0].values.resize(6000);
  BOOST_TEST(
      fails_with(f.over_lane(push_atom_v, encode(with_nan), f.bucket.id()), errc::non_finite));
  BOOST_TEST(fails_with(f.over_lane(push_atom_v, encode(wrong_shape), f.bucket.id()),
                        errc::shape_mismatch));
  BOOST_TEST(fails_with(f.over_lane(push_atom_v, wire{{'x', 'y'}, nullptr}, f.bucket.id()),
                        errc::malformed_message));
  auto after = f.over_caf(pull_atom_v, encode(pull_request{7, 1, 0, {}}));
  BOOST_TEST_REQUIRE(testing::succeeded(after));
  BOOST_TEST(after->bytes == via_caf->bytes, boost::test_tools::per_element());

  // The lane as the bucket's channel encodes the request itself.
  caf::expected<wire> channel = make_error(errc::timeout);
  answer_to(f.self.ptr(), f.lane->pull(f.self.ptr(), f.bucket, pull_request{7, 0, 0, {}}))
      .receive([&](const wire& reply) { channel = reply; },
               [&](caf::error& err) { channel = std::move(err); });
  BOOST_TEST_REQUIRE(testing::succeeded(channel));
  BOOST_TEST(bytes(*channel) == via_caf->bytes, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(large_payloads_on_one_host_go_through_the_shared_rings, lane_fixture) {
  // 256 KiB of values: above lane::ring_min_payload, so the push and the pull's reply take the
  // rings (the pull request itself is small and stays on the socket).
  bucket_spec large{8, 2, optimizer_config{}, {}};
  large.tensors.push_back(dense_tensor{"w", {256, 256}, 0, std::vector<float>(256 * 256, 0.5f)});
  static_assert(256 * 256 * sizeof(float) > lane::ring_min_payload);
  auto ringed = sys.spawn(parameter_bucket, std::make_shared<bucket_store>(large), config);
  listener->enroll(ringed);
  for (int round = 0; round < 100; ++round) {  // 100 x 256 KiB: round the 4 MiB rings 6 times
    auto ack = over_lane(push_atom_v, encode(push_for(large, 0, 1e-3f)), ringed.id());
    BOOST_TEST_REQUIRE(testing::succeeded(ack));
    auto via_lane = over_lane(pull_atom_v, encode(pull_request{8, 0, 0, {}}), ringed.id());
    caf::expected<wire> via_caf = make_error(errc::timeout);
    self->request(ringed, timeout, pull_atom_v, encode(pull_request{8, 1, 0, {}}))
        .receive([&](const wire& reply) { via_caf = reply; },
                 [&](caf::error& err) { via_caf = std::move(err); });
    BOOST_TEST_REQUIRE(testing::succeeded(via_lane));
    BOOST_TEST_REQUIRE(testing::succeeded(via_caf));
    BOOST_TEST_REQUIRE(via_lane->borrowed != nullptr);  // lent where it is in the ring
    BOOST_TEST_REQUIRE(bytes(*via_lane) == via_caf->bytes, boost::test_tools::per_element());
  }
  BOOST_TEST(lane->ring_frames() == 200u);  // every push and every reply
  // A reply larger than the ring is gathered and sent on the socket.
  bucket_spec huge{9, 2, optimizer_config{}, {}};
  huge.tensors.push_back(dense_tensor{"h", {1280, 1024}, 0, std::vector<float>(1280 * 1024, 2)});
  static_assert(1280 * 1024 * sizeof(float) > lane::ring_bytes);
  auto big = sys.spawn(parameter_bucket, std::make_shared<bucket_store>(huge), config);
  listener->enroll(big);
  auto whole = over_lane(pull_atom_v, encode(pull_request{9, 0, 0, {}}), big.id());
  BOOST_TEST_REQUIRE(testing::succeeded(whole));
  auto values = decode<pull_reply>(encoded(*whole), codec_limits{});
  BOOST_TEST_REQUIRE(testing::succeeded(values));
  BOOST_TEST(values->tensors.at(0).values == huge.tensors[0].values,
             boost::test_tools::per_element());
  BOOST_TEST(lane->ring_frames() == 200u);
  self->send_exit(big, caf::exit_reason::user_shutdown);
  // Over TCP nothing is shared.
  auto tcp = lane_link::open("127.0.0.1", listener->port(), secret, timeout, false);
  BOOST_TEST_REQUIRE(testing::succeeded(tcp));
  lane = *tcp;
  BOOST_TEST(
      testing::succeeded(over_lane(pull_atom_v, encode(pull_request{8, 0, 0, {}}), ringed.id())));
  BOOST_TEST(lane->ring_frames() == 0u);
  self->send_exit(ringed, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(an_unknown_or_ended_bucket_is_gone, lane_fixture) {
  BOOST_TEST(is_gone(over_lane(pull_atom_v, encode(pull_request{7, 0, 0, {}}), 999999)));
  // Not enrolled: the directory only knows the buckets its node enrolled.
  BOOST_TEST(is_gone(over_lane(pull_atom_v, encode(pull_request{7, 0, 0, {}}), self->id())));
  self->send_exit(bucket, caf::exit_reason::user_shutdown);
  self->wait_for(bucket);
  BOOST_TEST(is_gone(over_lane(pull_atom_v, encode(pull_request{7, 0, 0, {}}), bucket.id())));
}

BOOST_FIXTURE_TEST_CASE(a_wrong_secret_is_refused_both_ways, lane_fixture) {
  BOOST_TEST(fails_with(
      lane_link::open("127.0.0.1", listener->port(), "another-secret-0123456789", timeout),
      errc::authentication_failed));
  // The listener still serves the lane that proved the secret.
  BOOST_TEST(
      testing::succeeded(over_lane(pull_atom_v, encode(pull_request{7, 0, 0, {}}), bucket.id())));
}

BOOST_FIXTURE_TEST_CASE(an_oversized_frame_ends_its_connection_only, lane_fixture) {
  for (const bool local : {false, true}) {  // over TCP, then over the same-host socket
    BOOST_TEST_CONTEXT("same host: " << local) {
      auto connect = [&] {
        return local ? lane::connect_local(listener->local_name(), secret, timeout)
                     : lane::connect_lane("127.0.0.1", listener->port(), secret, timeout);
      };
      auto raw = connect();
      BOOST_TEST_REQUIRE(testing::succeeded(raw));
      lane::socket_fd s{raw->fd};
      lane::frame_header h;
      h.magic = lane::frame_magic;
      h.kind = static_cast<uint8_t>(lane::frame_kind::push);
      h.id = 1;
      h.target = bucket.id();
      h.size = lane::max_frame_bytes + 1;
      BOOST_TEST_REQUIRE(::send(s.get(), &h, sizeof h, MSG_NOSIGNAL) == ssize_t(sizeof h));
      char byte = 0;
      BOOST_TEST(::recv(s.get(), &byte, 1, 0) == 0);  // the server closed it, answering nothing

      auto garbled = connect();
      BOOST_TEST_REQUIRE(testing::succeeded(garbled));
      lane::socket_fd g{garbled->fd};
      const char junk[64] = "not a frame at all, just bytes on the socket";
      BOOST_TEST_REQUIRE(::send(g.get(), junk, sizeof junk, MSG_NOSIGNAL) == ssize_t(sizeof junk));
      BOOST_TEST(::recv(g.get(), &byte, 1, 0) <= 0);  // closed (or reset: junk was left unread)

      BOOST_TEST(testing::succeeded(
          over_lane(pull_atom_v, encode(pull_request{7, 0, 0, {}}), bucket.id())));
    }
  }
}

BOOST_FIXTURE_TEST_CASE(a_frame_its_bucket_holds_past_the_timeout_is_answered_gone, lane_fixture) {
  // Under BSP the bucket holds worker 0's pull at clock 5 until worker 1 catches up, which it
  // never does here; the server's lane times out after 300 ms, the client's after 10 s.
  auto held_spec = testing::two_slice_spec(optimizer_config{});
  held_spec.consistency.type = consistency_config::mode::bsp;
  auto holding = sys.spawn(parameter_bucket, std::make_shared<bucket_store>(held_spec), config);
  auto server = lane_listener::start(
      sys, lane_listener_config{"127.0.0.1", 0, secret, std::chrono::milliseconds(300),
                                logger{"lane", log_level::error}});
  BOOST_TEST_REQUIRE(testing::succeeded(server));
  (*server)->enroll(holding);
  auto link = lane_link::open("127.0.0.1", (*server)->port(), secret, timeout);
  BOOST_TEST_REQUIRE(testing::succeeded(link));
  auto ask = [&](const pull_request& pull) {
    return ask_lane(self, **link, lane::frame_kind::pull, holding.id(), encode(pull));
  };
  const auto start = std::chrono::steady_clock::now();
  BOOST_TEST(is_gone(ask(pull_request{7, 0, 5, {}})));
  const bool early = std::chrono::steady_clock::now() - start < timeout / 2;
  BOOST_TEST(early);  // the server said so, not the client's own deadline
  // The connection goes on: worker 1's pull at clock 0 is answered.
  BOOST_TEST(testing::succeeded(ask(pull_request{7, 1, 0, {}})));
  link->reset();
  (*server)->stop();
  self->send_exit(holding, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_frame_number_already_in_flight_is_refused, lane_fixture) {
  // Under BSP the bucket holds worker 0's pull at clock 5, so frame 7 stays owed; a second
  // frame 7 is answered `gone` at once and never reaches the bucket.
  auto held_spec = testing::two_slice_spec(optimizer_config{});
  held_spec.consistency.type = consistency_config::mode::bsp;
  auto holding = sys.spawn(parameter_bucket, std::make_shared<bucket_store>(held_spec), config);
  listener->enroll(holding);
  auto raw = lane::connect_lane("127.0.0.1", listener->port(), secret, timeout);
  BOOST_TEST_REQUIRE(testing::succeeded(raw));
  lane::socket_fd s{raw->fd};
  for (uint32_t worker : {0u, 1u}) {
    const wire pull = encode(pull_request{7, worker, 5, {}});
    lane::frame_header h;
    h.kind = static_cast<uint8_t>(lane::frame_kind::pull);
    h.id = 7;
    h.target = holding.id();
    h.size = pull.bytes.size();
    BOOST_TEST_REQUIRE(!lane::write_frame(s, h, pull.bytes.data()));
  }
  lane::frame_header answer;
  wire_bytes text;
  lane::frame_reader frames{s};
  BOOST_TEST_REQUIRE(!frames.read(timeout, answer, text));
  BOOST_TEST(answer.id == 7u);
  BOOST_TEST(answer.kind == static_cast<uint8_t>(lane::frame_kind::gone));
  BOOST_TEST(std::string(text.begin(), text.end()).find("already in flight") != std::string::npos);
  self->send_exit(holding, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_paired_push_and_pull_are_both_answered, lane_fixture) {
  size_t written = 0;
  const auto [push_id, pull_id] =
      lane->push_then_pull(self.ptr(), bucket, push_for(spec, 0, 1.0f), std::nullopt,
                           pull_request{7, 0, 1, {}}, written);
  auto acked = answer_to(self.ptr(), push_id);
  auto pulled = answer_to(self.ptr(), pull_id);
  caf::expected<wire> ack = make_error(errc::timeout), values = make_error(errc::timeout);
  acked.receive([&](const wire& w) { ack = w; }, [&](caf::error& err) { ack = std::move(err); });
  pulled.receive([&](const wire& w) { values = w; },
                 [&](caf::error& err) { values = std::move(err); });
  BOOST_TEST_REQUIRE(testing::succeeded(ack));
  BOOST_TEST(testing::succeeded(decode<push_ack>(*ack)));
  BOOST_TEST_REQUIRE(testing::succeeded(values));
  // The values already hold the push: the same bytes as a pull over CAF after it.
  auto via_caf = over_caf(pull_atom_v, encode(pull_request{7, 1, 0, {}}));
  BOOST_TEST_REQUIRE(testing::succeeded(via_caf));
  BOOST_TEST(bytes(*values) == via_caf->bytes, boost::test_tools::per_element());
}

namespace {

// A BSP bucket of two workers (it holds a worker's pull for the next clock until the other
// has pushed), enrolled with `listener`.
bucket_actor bsp_bucket(lane_fixture& f, lane_listener& listener) {
  auto held_spec = testing::two_slice_spec(optimizer_config{});
  held_spec.consistency.type = consistency_config::mode::bsp;
  auto holding = f.sys.spawn(parameter_bucket, std::make_shared<bucket_store>(held_spec), f.config);
  listener.enroll(holding);
  return holding;
}

// Writes worker 0's push (frame `push_id`, paired) and its pull of clock 1 (frame `pull_id`)
// for `target` together, as lane_link::push_then_pull does.
void write_pair(const lane::socket_fd& s, const bucket_spec& spec, uint64_t target,
                uint64_t push_id, uint64_t pull_id) {
  const wire push = encode(push_for(spec, 0, 1.0f));
  const wire pull = encode(pull_request{7, 0, 1, {}});
  const std::span<const char> parts[2] = {{push.bytes.data(), push.bytes.size()},
                                          {pull.bytes.data(), pull.bytes.size()}};
  lane::frame_out frames[2];
  for (int i = 0; i < 2; ++i) {
    frames[i].header.kind =
        static_cast<uint8_t>(i == 0 ? lane::frame_kind::push : lane::frame_kind::pull);
    frames[i].header.id = i == 0 ? push_id : pull_id;
    frames[i].header.target = target;
    frames[i].header.size = parts[i].size();
    frames[i].payload = byte_parts{&parts[i], 1};
  }
  frames[0].header.paired = 1;
  BOOST_TEST_REQUIRE(testing::succeeded(lane::write_frames_from(s, frames, 0, true)));
}

lane::frame_header next_answer(lane::frame_reader& frames) {
  lane::frame_header h;
  wire_bytes payload;
  BOOST_TEST_REQUIRE(!frames.read(timeout, h, payload));
  return h;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_paired_push_is_answered_with_its_pull, lane_fixture) {
  auto holding = bsp_bucket(*this, *listener);
  auto raw = lane::connect_lane("127.0.0.1", listener->port(), secret, timeout);
  BOOST_TEST_REQUIRE(testing::succeeded(raw));
  lane::socket_fd s{raw->fd};
  write_pair(s, spec, holding.id(), 1, 2);
  // Worker 0's pull of clock 1 waits for worker 1's push, and the push's ack waits with it.
  auto quiet = lane::readable(s, std::chrono::milliseconds(300));
  BOOST_TEST_REQUIRE(testing::succeeded(quiet));
  BOOST_TEST(!*quiet);
  self->request(holding, timeout, push_atom_v, encode(push_for(spec, 1, 1.0f)))
      .receive([](const wire&) {}, [](caf::error&) {});
  lane::frame_reader frames{s};
  const auto ack = next_answer(frames);
  const auto values = next_answer(frames);
  BOOST_TEST(ack.id == 1u);
  BOOST_TEST(values.id == 2u);
  BOOST_TEST(ack.kind == static_cast<uint8_t>(lane::frame_kind::reply));
  BOOST_TEST(values.kind == static_cast<uint8_t>(lane::frame_kind::reply));
  self->send_exit(holding, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_paired_push_without_its_pull_is_answered_alone, lane_fixture) {
  auto holding = bsp_bucket(*this, *listener);
  auto raw = lane::connect_lane("127.0.0.1", listener->port(), secret, timeout);
  BOOST_TEST_REQUIRE(testing::succeeded(raw));
  lane::socket_fd s{raw->fd};
  write_pair(s, spec, holding.id(), 1, 5);  // frame 5 is not frame 1's pull (that is 2)
  lane::frame_reader frames{s};
  const auto ack = next_answer(frames);  // while the pull is still held
  BOOST_TEST(ack.id == 1u);
  BOOST_TEST(ack.kind == static_cast<uint8_t>(lane::frame_kind::reply));
  self->send_exit(holding, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_held_pair_is_let_go_when_its_pull_is_late, lane_fixture) {
  auto server = lane_listener::start(
      sys, lane_listener_config{"127.0.0.1", 0, secret, std::chrono::milliseconds(300),
                                logger{"lane", log_level::error}});
  BOOST_TEST_REQUIRE(testing::succeeded(server));
  auto holding = bsp_bucket(*this, **server);
  auto raw = lane::connect_lane("127.0.0.1", (*server)->port(), secret, timeout);
  BOOST_TEST_REQUIRE(testing::succeeded(raw));
  lane::socket_fd s{raw->fd};
  write_pair(s, spec, holding.id(), 1, 2);
  lane::frame_reader frames{s};
  const auto ack = next_answer(frames);  // the sweep answers the pull `gone` and lets the ack go
  const auto gone = next_answer(frames);
  BOOST_TEST(ack.id == 1u);
  BOOST_TEST(ack.kind == static_cast<uint8_t>(lane::frame_kind::reply));
  BOOST_TEST(gone.id == 2u);
  BOOST_TEST(gone.kind == static_cast<uint8_t>(lane::frame_kind::gone));
  (*server)->stop();
  self->send_exit(holding, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_lost_connection_ends_the_link, lane_fixture) {
  listener->stop();
  BOOST_TEST(testing::await([&] { return lane->broken(); }, timeout));
  BOOST_TEST(is_gone(over_lane(pull_atom_v, encode(pull_request{7, 0, 0, {}}), bucket.id())));
  lane_map lanes;
  lanes.add(lane);
  BOOST_TEST(lanes.find(sys.node()) == nullptr);  // its node's messages go over CAF now
  // The bucket itself is untouched.
  BOOST_TEST(testing::succeeded(over_caf(pull_atom_v, encode(pull_request{7, 1, 0, {}}))));
}

// A server that proves the secret and then reads frames without ever answering.
struct silent_server {
  silent_server() {
    auto bound = lane::listen_on("127.0.0.1", 0);
    BOOST_TEST_REQUIRE(testing::succeeded(bound));
    listen_fd = bound->first;
    port = bound->second;
    thread = std::thread([this] {
      const int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd < 0) return;
      lane::socket_fd s{fd};
      lane::tune(fd, timeout);
      if (lane::accept_lane(s, secret, "silent", "", timeout)) return;
      char sink[4096];
      while (::recv(fd, sink, sizeof sink, 0) > 0) {
      }
    });
  }
  ~silent_server() {
    ::shutdown(listen_fd, SHUT_RDWR);
    ::close(listen_fd);
    thread.join();
  }
  int listen_fd = -1;
  uint16_t port = 0;
  std::thread thread;
};

BOOST_AUTO_TEST_CASE(a_request_nobody_answers_fails_after_the_timeout) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  silent_server server;
  const auto short_timeout = std::chrono::milliseconds(200);
  {
    auto link = lane_link::open("127.0.0.1", server.port, secret, short_timeout);
    BOOST_TEST_REQUIRE(testing::succeeded(link));
    const auto sent = std::chrono::steady_clock::now();
    auto asked =
        ask_lane(self, **link, lane::frame_kind::pull, 1, encode(pull_request{7, 0, 0, {}}));
    const std::optional<caf::error> failed =
        asked ? std::nullopt : std::optional<caf::error>{asked.error()};
    const auto waited = std::chrono::steady_clock::now() - sent;
    BOOST_TEST_REQUIRE(failed.has_value());
    BOOST_TEST(failed->category() != error_category);  // a bucket gone: the worker resends
    BOOST_TEST(waited >= short_timeout);
    BOOST_TEST(waited < 20 * short_timeout);  // the sweep's bound is 1.25 timeouts, loaded host
  }  // the link's end shuts the socket, so the server's thread ends
}
