// Unit tests of DiLoCo's outer optimizers and the int8 blocks (kernels_test module): Nesterov
// and delayed Nesterov against double-precision references written here, over several steps
// and sizes 0, 1, 7 and 1000; delayed Nesterov with N = 1 equal to Nesterov bit for bit, and
// over N arrivals equal to one Nesterov step on their mean; int8 quantisation within half a
// step of each block, exact on zeros, and its error feedback sending everything in time.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/int8_blocks.hpp"
#include "kernels/cpu/optimizers.hpp"
#include "tests/unit/random_values.hpp"

namespace k = troupe::kernels;
using troupe::testing::random_values;

namespace {

bool near(double a, double b) {
  return std::abs(a - b) <= 1e-5 + 1e-5 * std::abs(b);
}

void nesterov_matches_reference(size_t n) {
  const float lr = 0.7f, mu = 0.9f;
  auto theta = random_values(n, 1, 1.0f);
  std::vector<float> u(n, 0.0f);
  std::vector<double> ref_theta(theta.begin(), theta.end()), ref_u(n, 0.0);
  for (uint32_t step = 0; step < 5; ++step) {
    const auto g = random_values(n, 10 + step, 0.1f);
    k::nesterov_step(theta, u, g, lr, mu);
    for (size_t i = 0; i < n; ++i) {
      ref_u[i] = mu * ref_u[i] + g[i];
      ref_theta[i] -= lr * (g[i] + mu * ref_u[i]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    BOOST_TEST_REQUIRE(near(theta[i], ref_theta[i]), "value " << i);
    BOOST_TEST_REQUIRE(near(u[i], ref_u[i]), "velocity " << i);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(outer_optimizers)

BOOST_AUTO_TEST_CASE(nesterov_sizes) {
  for (size_t n : {0, 1, 7, 1000}) nesterov_matches_reference(n);
}

BOOST_AUTO_TEST_CASE(delayed_nesterov_of_one_is_nesterov_bit_for_bit) {
  const size_t n = 1000;
  auto a = random_values(n, 2, 1.0f), b = a;
  std::vector<float> ua(n, 0.0f), ub(n, 0.0f), buffer(n, 0.0f);
  for (uint64_t t = 1; t <= 6; ++t) {
    const auto g = random_values(n, 20 + t, 0.1f);
    k::nesterov_step(a, ua, g, 0.5f, 0.8f);
    k::delayed_nesterov_step(b, ub, buffer, g, 0.5f, 0.8f, 1, t);
  }
  BOOST_TEST(a == b, boost::test_tools::per_element());
  BOOST_TEST(ua == ub, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(delayed_nesterov_applies_each_arrival_and_the_momentum_every_nth) {
  const size_t n = 7;
  const uint32_t delay = 3;
  const float lr = 0.7f, mu = 0.9f;
  auto theta = random_values(n, 3, 1.0f);
  std::vector<float> u(n, 0.0f), buffer(n, 0.0f);
  std::vector<double> ref_theta(theta.begin(), theta.end()), ref_u(n, 0.0), ref_b(n, 0.0);
  for (uint64_t t = 1; t <= 7; ++t) {
    const auto g = random_values(n, 30 + t, 0.1f);
    k::delayed_nesterov_step(theta, u, buffer, g, lr, mu, delay, t);
    for (size_t i = 0; i < n; ++i) {
      ref_theta[i] -= lr * g[i] / delay;  // every arrival at once, at lr / N
      ref_b[i] += g[i];
      if (t % delay == 0) {  // the momentum on the mean of the N arrivals
        ref_u[i] = mu * ref_u[i] + ref_b[i] / delay;
        ref_theta[i] -= lr * mu * ref_u[i];
        ref_b[i] = 0;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      BOOST_TEST_REQUIRE(near(theta[i], ref_theta[i]), "step " << t << " value " << i);
      BOOST_TEST_REQUIRE(near(buffer[i], ref_b[i]), "step " << t << " buffer " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(int8_blocks_are_within_half_a_step_and_zeros_stay_zero) {
  const size_t n = 1001;  // three full blocks and a short one
  auto x = random_values(n, 4, 1.0f);
  x[300] = 40.0f;  // one block with a large value: its others round coarsely, others do not
  std::vector<int8_t> q(n);
  std::vector<float> scales(k::int8_blocks(n)), back(n);
  k::int8_quantize(x, q, scales);
  k::int8_dequantize(q, scales, back);
  for (size_t i = 0; i < n; ++i)
    BOOST_TEST_REQUIRE(std::abs(back[i] - x[i]) <= scales[i / k::int8_block] * 0.5001f);
  BOOST_TEST(scales[1] == 40.0f / 127.0f);
  std::vector<float> zeros(300, 0.0f), zq_back(300, 1.0f);
  std::vector<int8_t> zq(300);
  std::vector<float> zs(k::int8_blocks(300));
  k::int8_quantize(zeros, zq, zs);
  k::int8_dequantize(zq, zs, zq_back);
  BOOST_TEST(zq_back == zeros, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(int8_error_feedback_sends_everything_in_time) {
  // The same small values pushed 50 times beside one large value: alone each rounds to 0, but
  // what the rounding lost goes with the next push, so the sums sent stay within one step.
  const size_t n = 256;
  std::vector<float> residual(n, 0.0f);
  std::vector<double> sent(n, 0.0), wanted(n, 0.0);
  for (int push = 0; push < 50; ++push) {
    std::vector<float> g(n, 0.001f);
    g[0] = 1.0f;
    for (size_t i = 0; i < n; ++i) wanted[i] += g[i];
    k::int8_round_trip(g, residual);
    for (size_t i = 0; i < n; ++i) sent[i] += g[i];
  }
  for (size_t i = 0; i < n; ++i) BOOST_TEST_REQUIRE(std::abs(sent[i] - wanted[i]) <= 1.0 / 127);
  BOOST_TEST(sent[1] > 0.04);  // without feedback 0.001 / (1 / 127) rounds to 0 every time
}

BOOST_AUTO_TEST_SUITE_END()
