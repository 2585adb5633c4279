// Unit tests of --optimizer dash in a parameter bucket: matrix slices take DASH and vectors
// AdamW, the DASH fields cross the codec (and bad ones are refused), and a saved bucket with
// DASH state restores to exactly the same state and the same next steps.
#define BOOST_TEST_MODULE bucket_dash
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "actors/bucket/bucket_store.hpp"
#include "tests/unit/dash_bucket_support.hpp"
#include "tests/unit/expect_error.hpp"

using namespace troupe;
using troupe::testing::push_at;

namespace {

bucket_spec dash_spec() {
  return testing::dash_bucket_spec(5, 3, 2, 3);
}

}  // namespace

BOOST_AUTO_TEST_CASE(dash_fields_cross_the_codec_and_bad_ones_are_refused) {
  auto spec = dash_spec();
  spec.optimizer.dash_solver = root_solver::newton_db;
  spec.optimizer.dash_storage = dash_storage::bf16;
  spec.optimizer.dash_nesterov = true;
  spec.optimizer.dash_scaling = root_scaling::frobenius;
  auto back = decode<bucket_spec>(encode(spec));
  BOOST_TEST_REQUIRE(testing::succeeded(back));
  BOOST_TEST((back->optimizer.type == optimizer_config::kind::dash));
  BOOST_TEST(back->optimizer.dash_block == 2u);
  BOOST_TEST(back->optimizer.dash_freq == 2u);
  BOOST_TEST((back->optimizer.dash_solver == root_solver::newton_db));
  BOOST_TEST((back->optimizer.dash_storage == dash_storage::bf16));
  BOOST_TEST(back->optimizer.dash_nesterov);
  BOOST_TEST((back->optimizer.dash_scaling == root_scaling::frobenius));
  spec.optimizer.dash_block = 0;
  BOOST_TEST(testing::fails_with(decode<bucket_spec>(encode(spec)), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(a_dash_bucket_trains_and_restores_exactly) {
  const auto spec = dash_spec();
  bucket_store store{spec};
  for (uint64_t c = 0; c < 3; ++c) BOOST_TEST_REQUIRE(!!store.apply(push_at(spec, c, 10 + c)));
  for (size_t s = 0; s < 2; ++s)
    for (size_t i = 0; i < spec.tensors[s].values.size(); ++i) {
      BOOST_TEST(std::isfinite(store.slices()[s].values[i]));
      BOOST_TEST(store.slices()[s].values[i] != spec.tensors[s].values[i]);
    }
  const auto saved = store.save();
  auto restored = bucket_store::restore(saved);
  BOOST_TEST_REQUIRE(testing::succeeded(restored));
  const auto again = restored->save();
  BOOST_TEST_REQUIRE(again.size() == saved.size());
  for (size_t i = 0; i < saved.size(); ++i) BOOST_TEST((again[i].bytes == saved[i].bytes));
  // Step 4 recomputes the roots (every 2 steps): both copies take it the same way.
  for (uint64_t c = 3; c < 5; ++c) {
    BOOST_TEST_REQUIRE(!!store.apply(push_at(spec, c, 10 + c)));
    BOOST_TEST_REQUIRE(!!restored->apply(push_at(spec, c, 10 + c)));
  }
  for (size_t s = 0; s < 2; ++s)
    BOOST_TEST(store.slices()[s].values == restored->slices()[s].values,
               boost::test_tools::per_element());
  BOOST_TEST(store.dash_resets() == 0u);
}

BOOST_AUTO_TEST_CASE(large_dash_state_is_saved_in_parts_of_whole_blocks) {
  // Two 1450 x 4 blocks: each L block (1450^2 values) is over one part's 2 Mi values, so each
  // goes in a part of its own (the second from block 1 on), and comes back in place.
  auto spec = dash_spec();
  spec.optimizer.dash_block = 1450;
  spec.optimizer.dash_solver = root_solver::evd;  // evd: the quickest root at this size here
  spec.tensors = {dense_tensor{"w", {2900, 4}, 0, std::vector<float>(2900 * 4, 0.5f)}};
  bucket_store store{spec};
  push_request push{0, 0, 0, vector_clock{std::vector<uint64_t>{0}}};
  push.dense.push_back(dense_tensor{"w", {2900, 4}, 0, std::vector<float>(2900 * 4, 1e-3f)});
  BOOST_TEST_REQUIRE(!!store.apply(push));
  const auto saved = store.save();
  size_t dash_parts = 0, from_block_one = 0;
  for (size_t i = 1; i < saved.size(); ++i) {
    auto part = decode<bucket_state_part>(saved[i]);
    BOOST_TEST_REQUIRE(testing::succeeded(part));
    if (part->type != bucket_state_part::kind::dash) continue;
    ++dash_parts;
    BOOST_TEST(part->tensors[0].values.size() <= size_t{1450} * 1450);
    from_block_one += part->tensors[0].row_offset == 1;
  }
  BOOST_TEST(dash_parts == 6u);  // L and its root two parts each; R and its root one each
  BOOST_TEST(from_block_one == 2u);
  auto restored = bucket_store::restore(saved);
  BOOST_TEST_REQUIRE(testing::succeeded(restored));
  const auto again = restored->save();
  BOOST_TEST_REQUIRE(again.size() == saved.size());
  for (size_t i = 0; i < saved.size(); ++i) BOOST_TEST((again[i].bytes == saved[i].bytes));
}
