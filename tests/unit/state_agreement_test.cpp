// The state agreement of a new dp generation (agree_on_state, allreduce_group's sync) over the
// gloo and actors backends, members as threads: the member with the most steps sends its store
// in pieces to the members behind it, who rebuild it (moments included) from the pieces; members
// level with it keep their own and nothing moves; at step 0 everyone takes member 0's; a member
// of another model refuses it and every member says so; a state spoiled by a failed hand-over is
// never a source. A state in bytes (a Python loop's) crosses in pieces of at most 8 MiB.
#define BOOST_TEST_MODULE state_agreement
#include <boost/test/unit_test.hpp>

#include <csignal>
#include <mutex>

#include <caf/actor_system.hpp>

#include "actors/dp/collective/actor_collective.hpp"
#include "actors/dp/collective/gloo_collective.hpp"
#include "actors/dp/trainer/store_pieces.hpp"
#include "collective_ranks.hpp"
#include "expect_error.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"

using namespace troupe;

using troupe::testing::ignore_sigpipe;
BOOST_TEST_GLOBAL_FIXTURE(ignore_sigpipe);

namespace {

const auto timeout = std::chrono::milliseconds(20000);

std::vector<std::string> run_ranks(uint32_t size, const testing::rank_body& body,
                                   const std::string& backend) {
  return testing::run_ranks(
      size,
      [&](rendezvous_store& store, uint32_t r,
          uint32_t n) -> caf::expected<std::unique_ptr<collective>> {
        if (backend == "actors")
          return make_actor_collective(
              testing::collective_test_system(), store,
              actor_collective_options{r, n, 1, 42, "127.0.0.1", "g1/", timeout});
        return make_gloo_collective(store, gloo_options{r, n, "127.0.0.1", "g1/", timeout});
      },
      body);
}

// A member's one flat slice of `n` values (3 M: the arrays cross in several chunks and
// messages), Adam, stepped `steps` times by a gradient that depends on `seed`.
bucket_store store_of(uint32_t n, uint64_t steps, float seed) {
  optimizer_config adam;
  adam.lr = 0.01f;
  bucket_spec spec{0, 1, adam, {}};
  spec.values_follow = true;
  spec.tensors.push_back(dense_tensor{"(flat)", {n}, 0, {}});
  bucket_store store{std::move(spec)};
  std::vector<float> grad(n);
  for (uint64_t k = 0; k < steps; ++k) {
    for (uint32_t i = 0; i < n; ++i) grad[i] = seed * float((i + k) % 17) - 3.0f;
    push_request push{0, 0, k, vector_clock{}};
    push.dense.push_back(dense_tensor{"(flat)", {n}, 0, {}});
    BOOST_REQUIRE(store.apply(std::move(push), {std::span<const float>(grad)}));
  }
  return store;
}

std::vector<dense_tensor> shapes_of(const bucket_store& s) {
  std::vector<dense_tensor> out;
  for (const auto& t : s.slices()) out.push_back(dense_tensor{t.name, t.shape, t.row_offset, {}});
  return out;
}

std::vector<std::vector<float>> arrays_of(const bucket_store& s) {
  std::vector<std::vector<float>> out;
  for (auto a : s.arrays()) out.emplace_back(a.begin(), a.end());
  return out;
}

struct outcome {
  caf::expected<std::shared_ptr<sync_result>> agreed = caf::error{};
  std::optional<bucket_store> store;
  bool spoiled = false;
};

constexpr uint32_t values = 3u << 20;

// Each member r offers store_of(sizes[r], steps[r], seeds[r]) (none where sizes[r] is 0: spoiled).
std::vector<outcome> agree(const std::string& backend, std::vector<uint32_t> sizes,
                           std::vector<uint64_t> steps, std::vector<float> seeds) {
  const auto n = static_cast<uint32_t>(sizes.size());
  std::vector<outcome> out(n);
  auto failures = run_ranks(
      n,
      [&](collective& c, uint32_t r) {
        const uint32_t size = sizes[r] ? sizes[r] : values;  // (a spoiled member's model)
        auto own = sizes[r] ? std::optional<bucket_store>(store_of(size, steps[r], seeds[r]))
                            : std::nullopt;
        auto pieces = std::make_shared<store_pieces>(
            std::move(own), shapes_of(store_of(size, 0, 0)), update_rules{});
        const sync_order order{steps[r], pieces};
        out[r].agreed = agree_on_state(c, order, timeout);
        out[r].spoiled = pieces->spoiled();
        out[r].store = std::move(*pieces).result();
      },
      backend);
  BOOST_TEST_REQUIRE(failures.empty());
  return out;
}

const std::vector<std::string> backends = {"gloo", "actors"};

}  // namespace

BOOST_AUTO_TEST_CASE(members_behind_take_the_most_advanced_state_and_the_others_keep_theirs) {
  for (const auto& backend : backends) {
    BOOST_TEST_CONTEXT(backend) {
      const auto results = agree(backend, {values, values, values}, {2, 5, 5}, {1.0f, 2.0f, 2.0f});
      const auto source = arrays_of(store_of(values, 5, 2.0f));
      for (uint32_t r = 0; r < 3; ++r) {
        BOOST_TEST_CONTEXT("member " << r) {
          BOOST_TEST_REQUIRE(static_cast<bool>(results[r].agreed));
          const auto& agreed = **results[r].agreed;
          BOOST_TEST(agreed.steps == 5u);
          BOOST_TEST(agreed.source == 1u);  // the lowest rank among the most advanced
          BOOST_TEST(agreed.taken == (r == 0));
          BOOST_TEST_REQUIRE(results[r].store.has_value());
          BOOST_TEST((arrays_of(*results[r].store) == source));  // values and both moments
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(at_step_zero_every_member_takes_member_zeros_state) {
  const auto results = agree("gloo", {values, values}, {0, 0}, {1.0f, 1.0f});
  BOOST_TEST_REQUIRE(static_cast<bool>(results[1].agreed));
  BOOST_TEST((*results[1].agreed)->taken);
  BOOST_TEST(!(*results[0].agreed)->taken);
  BOOST_TEST((arrays_of(*results[1].store) == arrays_of(*results[0].store)));
}

BOOST_AUTO_TEST_CASE(a_member_of_another_model_refuses_and_every_member_fails) {
  for (const auto& backend : backends) {
    BOOST_TEST_CONTEXT(backend) {
      const auto results = agree(backend, {values, values + 1}, {4, 1}, {1.0f, 1.0f});
      for (uint32_t r = 0; r < 2; ++r) {
        BOOST_TEST(testing::fails_with(results[r].agreed, errc::shape_mismatch));
        BOOST_TEST(results[r].store.has_value());  // nothing was dropped: the spec came first
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_spoiled_state_is_never_a_source) {
  // Member 0 lost its state in an earlier hand-over: member 1, behind on steps, is the source.
  auto results = agree("gloo", {0, values}, {9, 3}, {1.0f, 1.0f});
  BOOST_TEST_REQUIRE(static_cast<bool>(results[0].agreed),
                     (results[0].agreed ? "" : describe(results[0].agreed.error())));
  BOOST_TEST((*results[0].agreed)->source == 1u);
  BOOST_TEST((*results[0].agreed)->steps == 3u);
  BOOST_TEST(!results[0].spoiled);
  BOOST_TEST((arrays_of(*results[0].store) == arrays_of(store_of(values, 3, 1.0f))));
  // When every member's is spoiled, the job has no state left and every member says so.
  results = agree("gloo", {0, 0}, {9, 3}, {1.0f, 1.0f});
  for (const auto& o : results) BOOST_TEST(testing::fails_with(o.agreed, errc::job_failed));
}

BOOST_AUTO_TEST_CASE(a_state_in_bytes_crosses_in_pieces) {
  const size_t size = byte_pieces::max_piece_bytes * 2 + 12345;
  std::vector<std::vector<char>> taken(3);
  bool took[3] = {false, false, false};  // (not a vector<bool>: each member's thread writes one)
  auto failures = run_ranks(
      3,
      [&](collective& c, uint32_t r) {
        std::vector<char> bytes(r == 2 ? size : 10, char(r + 1));
        for (size_t i = 0; i < bytes.size(); i += 4096) bytes[i] = char(i / 4096);
        auto pieces = std::make_shared<byte_pieces>(std::move(bytes));
        auto agreed = agree_on_state(c, sync_order{r == 2 ? 7u : 3u, pieces}, timeout);
        if (!agreed) return;
        took[r] = (*agreed)->taken;
        taken[r] = std::move(*pieces).taken();
      },
      "gloo");
  BOOST_TEST_REQUIRE(failures.empty());
  BOOST_TEST(!took[2]);
  BOOST_TEST(taken[2].empty());
  for (uint32_t r = 0; r < 2; ++r) {
    BOOST_TEST(took[r]);
    BOOST_TEST_REQUIRE(taken[r].size() == size);
    BOOST_TEST(taken[r][4096 * 3] == char(3));
    BOOST_TEST(taken[r][1] == char(3));
  }
}
