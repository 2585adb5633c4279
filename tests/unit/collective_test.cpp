// The collective backends (gloo, actors) with N ranks as threads of one process over a
// memory_store: each operation against the sum computed here, at sizes 0, 1, odd and large;
// uneven shards refused; every member gets the same bits; a member that never calls makes the
// others time out within the bound; a member that goes away makes them fail.
#define BOOST_TEST_MODULE collective
#include <boost/test/unit_test.hpp>

#include <csignal>
#include <functional>
#include <thread>

#include <caf/actor_system.hpp>

#include <atomic>
#include "actors/dp/collective/actor_collective.hpp"
#include "actors/dp/collective/gloo_collective.hpp"

#include "collective_ranks.hpp"
#include "expect_error.hpp"
#include "tests/support/progress.hpp"
#include "troupe/node.hpp"

using namespace troupe;
using troupe::testing::is_error;
using troupe::testing::rank_body;
using troupe::testing::value_of;

using troupe::testing::ignore_sigpipe;
BOOST_TEST_GLOBAL_FIXTURE(ignore_sigpipe);

namespace {

caf::expected<std::unique_ptr<collective>> make_member(const std::string& backend,
                                                       rendezvous_store& store, uint32_t r,
                                                       uint32_t size,
                                                       std::chrono::milliseconds timeout) {
  if (backend == "actors")
    return make_actor_collective(
        testing::collective_test_system(), store,
        actor_collective_options{r, size, 1, 42, "127.0.0.1", "g1/", timeout});
  return make_gloo_collective(store, gloo_options{r, size, "127.0.0.1", "g1/", timeout});
}

const std::vector<std::string> backends = {"gloo", "actors"};

std::vector<std::string> run_ranks(uint32_t size, const rank_body& body,
                                   const std::string& backend = "gloo",
                                   std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  return testing::run_ranks(
      size,
      [&](rendezvous_store& store, uint32_t r, uint32_t n) {
        return make_member(backend, store, r, n, timeout);
      },
      body);
}

collective_call call(uint32_t tag) {
  return collective_call{tag, std::chrono::seconds(20)};
}

}  // namespace

BOOST_AUTO_TEST_CASE(allreduce_sums_every_member_at_every_size) {
  for (const auto& backend : backends)
    for (uint32_t size : {1u, 2u, 3u, 4u}) {
      BOOST_TEST_MESSAGE(backend << " x" << size);
      std::vector<std::vector<float>> results(size);
      const std::vector<size_t> lengths{0, 1, 7, 1001, 300000};
      auto failures = run_ranks(
          size,
          [&](collective& g, uint32_t r) {
            uint32_t tag = 0;
            for (size_t n : lengths) {
              std::vector<float> data(n);
              for (size_t i = 0; i < n; ++i) data[i] = value_of(r, i);
              if (auto err = g.allreduce(data, call(++tag))) return (void)(results[r] = {-1});
              results[r].insert(results[r].end(), data.begin(), data.end());
            }
          },
          backend);
      BOOST_TEST_REQUIRE(failures.empty());
      std::vector<float> want;
      for (size_t n : lengths)
        for (size_t i = 0; i < n; ++i) {
          float total = 0;
          for (uint32_t r = 0; r < size; ++r) total += value_of(r, i);
          want.push_back(total);
        }
      for (uint32_t r = 0; r < size; ++r) {
        BOOST_TEST_REQUIRE(results[r].size() == want.size());
        for (size_t i = 0; i < want.size(); ++i)
          BOOST_TEST_REQUIRE(std::abs(results[r][i] - want[i]) <= 1e-4f * (1 + std::abs(want[i])));
        BOOST_TEST_REQUIRE((results[r] == results[0]));  // the same bits on every member
      }
    }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_then_all_gather_is_an_allreduce) {
  for (const auto& backend : backends) {
    BOOST_TEST_CONTEXT(backend) {
      constexpr uint32_t size = 3;
      constexpr size_t n = 3 * 1000;
      std::vector<std::vector<float>> results(size);
      auto failures = run_ranks(
          size,
          [&](collective& g, uint32_t r) {
            std::vector<float> data(n);
            for (size_t i = 0; i < n; ++i) data[i] = value_of(r, i);
            if (g.reduce_scatter(data, call(1)) || g.all_gather(data, call(2))) return;
            results[r] = data;
          },
          backend);
      BOOST_TEST_REQUIRE(failures.empty());
      for (uint32_t r = 0; r < size; ++r) {
        BOOST_TEST_REQUIRE(results[r].size() == n);
        for (size_t i = 0; i < n; ++i)
          BOOST_TEST_REQUIRE(results[r][i] == value_of(0, i) + value_of(1, i) + value_of(2, i));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(broadcast_and_all_to_all_move_the_right_shards) {
  for (const auto& backend : backends) {
    BOOST_TEST_CONTEXT(backend) {
      constexpr uint32_t size = 4;
      constexpr size_t each = 5;
      std::vector<std::vector<float>> sent(size), swapped(size);
      auto failures = run_ranks(
          size,
          [&](collective& g, uint32_t r) {
            std::vector<float> data(each * size);
            for (size_t i = 0; i < data.size(); ++i) data[i] = value_of(r, i);
            if (g.broadcast(data, 2, call(1))) return;
            sent[r] = data;
            for (size_t i = 0; i < data.size(); ++i) data[i] = float(r * 100 + i);
            if (g.all_to_all(data, call(2))) return;
            swapped[r] = data;
          },
          backend);
      BOOST_TEST_REQUIRE(failures.empty());
      for (uint32_t r = 0; r < size; ++r) {
        BOOST_TEST_REQUIRE(sent[r].size() == each * size);
        for (size_t i = 0; i < sent[r].size(); ++i)
          BOOST_TEST_REQUIRE(sent[r][i] == value_of(2, i));
        BOOST_TEST_REQUIRE(swapped[r].size() == each * size);
        // Shard j came from member j, which sent us its shard r.
        for (uint32_t j = 0; j < size; ++j)
          for (size_t k = 0; k < each; ++k)
            BOOST_TEST_REQUIRE(swapped[r][j * each + k] == float(j * 100 + r * each + k));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(uneven_shards_are_refused_and_the_group_still_works) {
  for (const auto& backend : backends) {
    BOOST_TEST_CONTEXT(backend) {
      std::vector<int> ok(2, 0);
      auto failures = run_ranks(
          2,
          [&](collective& g, uint32_t r) {
            std::vector<float> odd(7, 1.0f);
            if (!is_error(g.reduce_scatter(odd, call(1)), errc::shape_mismatch)) return;
            if (!is_error(g.all_gather(odd, call(2)), errc::shape_mismatch)) return;
            if (!is_error(g.broadcast(odd, 5, call(3)), errc::bad_configuration)) return;
            if (g.barrier(call(4))) return;
            if (g.allreduce(odd, call(5))) return;
            ok[r] = odd[0] == 2.0f;
          },
          backend);
      BOOST_TEST_REQUIRE(failures.empty());
      BOOST_TEST(ok[0] == 1);
      BOOST_TEST(ok[1] == 1);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_member_that_never_calls_makes_the_others_time_out) {
  std::vector<caf::error> errors(2);
  std::vector<double> waited(2);
  std::atomic<bool> given_up{false};
  auto failures = run_ranks(2, [&](collective& g, uint32_t r) {
    if (r == 1) {  // joins the group, then does nothing until the other has given up
      testing::await([&] { return given_up.load(); }, std::chrono::seconds(60));
      return;
    }
    std::vector<float> data(1000, 1.0f);
    const auto began = std::chrono::steady_clock::now();
    errors[r] = g.allreduce(data, collective_call{7, std::chrono::milliseconds(300)});
    waited[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    given_up = true;
  });
  BOOST_TEST_REQUIRE(failures.empty());
  BOOST_TEST(bool(errors[0]));
  // The bound held: member 1 returns only once member 0 has given up, so member 0 cannot have
  // waited for it; 300 ms and the failure's path, far below the 60 s member 1 would wait.
  BOOST_TEST(waited[0] < 30);
}

BOOST_AUTO_TEST_CASE(a_member_that_goes_away_makes_the_others_fail) {
  std::vector<caf::error> errors(3);
  memory_store store;
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto group = make_gloo_collective(
          store, gloo_options{r, 3, "127.0.0.1", "g1/", std::chrono::seconds(10)});
      if (!group) return (void)(errors[r] = group.error());
      if (r == 2) return;  // leaves: its connections close when the group is destroyed
      std::vector<float> data(100000, 1.0f);
      errors[r] = (*group)->allreduce(data, collective_call{1, std::chrono::seconds(10)});
    });
  for (auto& t : threads) t.join();
  BOOST_TEST(bool(errors[0]));
  BOOST_TEST(bool(errors[1]));
  BOOST_TEST(!errors[2]);
}

BOOST_AUTO_TEST_CASE(a_group_that_cannot_form_says_so_within_its_timeout) {
  memory_store store;
  auto alone = make_gloo_collective(
      store, gloo_options{0, 2, "127.0.0.1", "g1/", std::chrono::milliseconds(300)});
  BOOST_TEST(!alone);
  auto wrong = make_gloo_collective(store, gloo_options{3, 2, "127.0.0.1", "g2/"});
  BOOST_TEST(testing::fails_with(wrong, errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(memory_store_sets_once_and_waits_with_a_bound) {
  memory_store store;
  BOOST_TEST(!store.set("a", {'1'}));
  BOOST_TEST(!store.set("a", {'1'}));  // the same value again is harmless
  BOOST_TEST(is_error(store.set("a", {'2'}), errc::bad_configuration));
  BOOST_TEST(is_error(store.set("", {'2'}), errc::bad_configuration));
  BOOST_TEST(
      is_error(store.set("big", std::vector<char>(max_store_value + 1)), errc::message_too_large));
  BOOST_TEST(
      testing::fails_with(store.get("missing", std::chrono::milliseconds(20)), errc::timeout));
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (void)store.set("b", {'x'});
  });
  auto b = store.get("b", std::chrono::seconds(10));
  later.join();
  BOOST_TEST_REQUIRE(bool(b));
  BOOST_TEST((*b == std::vector<char>{'x'}));
}
