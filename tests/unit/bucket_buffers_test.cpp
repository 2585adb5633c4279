// Unit tests of bucket_buffers (--zero-stage 2's reused bucket buffers), threads only: a take
// makes a new buffer while none lent is sent (a task that fills buckets out of order never
// waits on itself), waits for a sent one to come back once `most` are lent, and says so when
// none comes within its bound; a buffer that comes back is reused.
#define BOOST_TEST_MODULE bucket_buffers
#include <boost/test/unit_test.hpp>

#include <thread>

#include "actors/dp/trainer/bucket_buffers.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(a_take_makes_one_more_while_no_lent_buffer_is_sent) {
  auto pool = bucket_buffers::make(8, 2);
  std::vector<std::shared_ptr<bucket_buffers::lease>> filling;
  for (int i = 0; i < 4; ++i) {  // past `most`: none is sent, so none would come back
    auto l = pool->take(0ms);
    BOOST_TEST_REQUIRE(bool(l));
    BOOST_TEST((*l)->values(8).size() == 8u);
    filling.push_back(std::move(*l));
  }
}

BOOST_AUTO_TEST_CASE(a_take_waits_for_a_sent_buffer_and_reuses_it) {
  auto pool = bucket_buffers::make(4, 2);
  auto a = pool->take(0ms);
  auto b = pool->take(0ms);
  BOOST_TEST_REQUIRE(bool(a));
  BOOST_TEST_REQUIRE(bool(b));
  pool->sent(**a);
  (*a)->values(4)[0] = 42.0f;
  const float* first = (*a)->values(4).data();
  // Two lent, one of them sent: a third must wait until it comes back.
  BOOST_TEST(!pool->take(0ms));
  caf::expected<std::shared_ptr<bucket_buffers::lease>> got{nullptr};
  std::thread taker([&] { got = pool->take(3600s); });
  a->reset();  // the order is done with it
  taker.join();
  BOOST_TEST_REQUIRE(bool(got));
  BOOST_TEST((*got)->values(4).data() == first);
  BOOST_TEST((*got)->values(4)[0] == 42.0f);  // (not cleared: every value is put before it is sent)
}

BOOST_AUTO_TEST_CASE(a_take_past_its_bound_is_an_error) {
  auto pool = bucket_buffers::make(4, 1);
  auto a = pool->take(0ms);
  BOOST_TEST_REQUIRE(bool(a));
  pool->sent(**a);  // sent and never done with
  auto b = pool->take(10ms);
  BOOST_TEST_REQUIRE(!b);
  BOOST_TEST(describe(b.error()).find("no bucket buffer came back") != std::string::npos);
}
