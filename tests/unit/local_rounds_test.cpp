// Unit tests of a DiLoCo worker's rounds (actors/worker/local_rounds.hpp): which buckets each
// fragment holds, after which local step each syncs, and that a fragment's pseudo-gradient and
// the merge of the values its pull brings lose no local step and count none twice.
#define BOOST_TEST_MODULE local_rounds
#include <boost/test/unit_test.hpp>

#include <numeric>

#include "actors/worker/local_rounds.hpp"

using namespace troupe;

namespace {

// Two tensors of 4 values, one bucket each.
struct two_buckets {
  flat_layout layout{{tensor_spec{"a", {4}}, tensor_spec{"b", {4}}}};
  placement plan = plan_buckets(layout, 2, 1);
};

local_rounds sgd_rounds(uint32_t fragments) {
  local_rounds r;
  r.inner.type = optimizer_config::kind::sgd;
  r.inner.lr = 0.5f;
  r.fragments = fragments;
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(fragments_are_contiguous_groups_of_buckets) {
  using groups = std::vector<std::pair<uint32_t, uint32_t>>;
  BOOST_TEST((fragment_buckets(4, 1) == groups{{0, 4}}));
  BOOST_TEST((fragment_buckets(4, 4) == groups{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  BOOST_TEST((fragment_buckets(5, 2) == groups{{0, 2}, {2, 5}}));
}

BOOST_AUTO_TEST_CASE(fragment_k_syncs_after_step_k_h_over_f) {
  BOOST_TEST(sync_step(0, 1, 100) == 100u);
  for (uint32_t k = 0; k < 4; ++k) BOOST_TEST(sync_step(k, 4, 100) == 25 * (k + 1));
  // A short round (an epoch's last): every fragment still syncs, none before the first step.
  BOOST_TEST(sync_step(0, 4, 2) == 1u);
  BOOST_TEST(sync_step(3, 4, 2) == 2u);
}

BOOST_AUTO_TEST_CASE(one_fragment_pushes_start_minus_values_and_takes_the_pull) {
  two_buckets m;
  round_state r(sgd_rounds(1), m.layout.total, 2);
  std::vector<float> params(8, 0.0f), grad(8, 0.0f);
  std::iota(r.start.begin(), r.start.end(), 1.0f);  // the first pull
  merge_pulled(r, m.layout, m.plan, params);
  BOOST_TEST(params == r.start, boost::test_tools::per_element());
  const std::vector<float> g(8, 1.0f);
  inner_step(r, params, g);
  inner_step(r, params, g);  // two local steps of lr 0.5: every value down by 1
  BOOST_TEST(take_pseudo_gradient(r, m.layout, m.plan, 0, params, grad) == 32u);
  BOOST_TEST(grad == std::vector<float>(8, 1.0f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_fragment_keeps_the_steps_taken_after_its_sync) {
  two_buckets m;
  round_state r(sgd_rounds(2), m.layout.total, 2);
  std::vector<float> params(8, 0.0f), grad(8, 0.0f);
  merge_pulled(r, m.layout, m.plan, params);  // all zeros
  const std::vector<float> g(8, 2.0f);
  inner_step(r, params, g);  // step 1: every value -1; fragment 0 (bucket a) syncs
  take_pseudo_gradient(r, m.layout, m.plan, 0, params, grad);
  inner_step(r, params, g);  // step 2: -2; fragment 1 (bucket b) syncs
  take_pseudo_gradient(r, m.layout, m.plan, 1, params, grad);
  BOOST_TEST(grad == (std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2}),
             boost::test_tools::per_element());
  // The buckets applied them: the pulls bring 10 for a and 20 for b.
  std::fill(r.start.begin(), r.start.begin() + 4, 10.0f);
  std::fill(r.start.begin() + 4, r.start.end(), 20.0f);
  merge_pulled(r, m.layout, m.plan, params);
  // a keeps step 2, taken after its sync; b synced after its last step.
  BOOST_TEST(params == (std::vector<float>{9, 9, 9, 9, 20, 20, 20, 20}),
             boost::test_tools::per_element());
  // Next round: a's pseudo-gradient counts step 2 and the new step 3, once each.
  inner_step(r, params, g);
  take_pseudo_gradient(r, m.layout, m.plan, 0, params, grad);
  BOOST_TEST(grad[0] == 2.0f);
}

BOOST_AUTO_TEST_CASE(int8_pushes_are_rounded_as_they_travel_and_counted_at_a_byte_a_value) {
  two_buckets m;
  auto config = sgd_rounds(1);
  config.storage = comm_dtype::int8;
  round_state r(config, m.layout.total, 2);
  std::vector<float> params{0.1f, 0.2f, 0.3f, 1.0f, 0, 0, 0, 0}, grad(8, 0.0f);
  // Two buckets of 4 values: a byte each and a scale each.
  BOOST_TEST(take_pseudo_gradient(r, m.layout, m.plan, 0, params, grad) == 2u * (4 + 4));
  BOOST_TEST(grad[3] == -1.0f);
  BOOST_TEST(std::abs(grad[0] + 0.1f) <= 0.5f / 127);
  BOOST_TEST(std::abs(r.residual[0] - (-0.1f - grad[0])) < 1e-7);
}
