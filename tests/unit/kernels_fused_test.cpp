// The fused kernels against the passes they stand for: adam_dcasgd_step must give, bit for bit,
// what compensate_dcasgd followed by adam_step gives (Adam and AdamW, with and without the
// coupled L2 term, sizes around the vector widths, several steps on the same state).
#include <boost/test/unit_test.hpp>

#include <vector>

#include "kernels/cpu/compensation.hpp"
#include "kernels/cpu/optimizers.hpp"
#include "random_values.hpp"

namespace k = troupe::kernels;

namespace {

using troupe::testing::random_values;

void check_fused_matches_passes(size_t n, k::adam_hyper h) {
  const float lambda = 0.04f;
  auto theta = random_values(n, 1, 1.0f);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  auto theta2 = theta, m2 = m, v2 = v;
  for (uint64_t step = 1; step <= 4; ++step) {
    h.step = step;
    const auto grad = random_values(n, 10 + uint32_t(step), 0.5f);
    const auto read = random_values(n, 20 + uint32_t(step), 1.0f);
    k::adam_dcasgd_step(theta, m, v, grad, read, lambda, h);
    auto corrected = grad;
    k::compensate_dcasgd(corrected, theta2, read, lambda);
    k::adam_step(theta2, m2, v2, corrected, h);
  }
  BOOST_TEST(theta == theta2, boost::test_tools::per_element());
  BOOST_TEST(m == m2, boost::test_tools::per_element());
  BOOST_TEST(v == v2, boost::test_tools::per_element());
}

}  // namespace

BOOST_AUTO_TEST_CASE(adam_dcasgd_is_compensation_then_adam_bit_for_bit) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{17}, size_t{4097}, size_t{100003}}) {
    check_fused_matches_passes(n, k::adam_hyper{});  // Adam
    k::adam_hyper adamw;
    adamw.weight_decay = 0.01f;
    check_fused_matches_passes(n, adamw);
    k::adam_hyper l2;
    l2.l2 = 0.001f;
    check_fused_matches_passes(n, l2);
  }
}
