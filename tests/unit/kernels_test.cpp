// Unit tests of the CPU kernels: adam_step, sgd_momentum_step and the delay-compensation
// kernels (linear, dcasgd, adaptive with its running mean square) against straightforward
// double-precision references written here (sizes 0, 1, 7, 1000; several steps; abs + rel
// tolerance 1e-5), and the fp32 <-> bf16 / fp16 conversions (exact values, round to nearest
// even, NaN, overflow, subnormals, and every one of the 65536 16-bit patterns).
#define BOOST_TEST_MODULE kernels
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/compensation.hpp"
#include "kernels/cpu/compression.hpp"
#include "kernels/cpu/half.hpp"
#include "kernels/cpu/optimizers.hpp"
#include "kernels/cpu/vector_ops.hpp"

namespace k = troupe::kernels;

namespace {

constexpr double tolerance = 1e-5;

bool close(double actual, double expected) {
  return std::abs(actual - expected) <= tolerance + tolerance * std::abs(expected);
}

// Checks every element of `actual` against `expected`; reports the first mismatch only.
void check_close(const std::vector<float>& actual, const std::vector<double>& expected,
                 const char* what) {
  BOOST_TEST_REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!close(actual[i], expected[i])) {
      BOOST_TEST(close(actual[i], expected[i]),
                 what << "[" << i << "] = " << actual[i] << ", reference " << expected[i]);
      return;
    }
  }
}

std::vector<float> random_values(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> dist{lo, hi};
  std::vector<float> out(n);
  for (auto& x : out) x = dist(rng);
  return out;
}

std::vector<double> widen(const std::vector<float>& x) {
  return {x.begin(), x.end()};
}

// -- references ---------------------------------------------------------------------------------

struct adam_reference {
  std::vector<double> theta, m, v;

  void step(const std::vector<float>& grad, const k::adam_hyper& h) {
    const double t = static_cast<double>(h.step);
    const double c1 = 1.0 - std::pow(double{h.beta1}, t);
    const double c2 = 1.0 - std::pow(double{h.beta2}, t);
    for (size_t i = 0; i < theta.size(); ++i) {
      const double g = grad[i];
      m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g * g;
      const double m_hat = m[i] / c1;
      const double v_hat = v[i] / c2;
      theta[i] -= h.lr * (m_hat / (std::sqrt(v_hat) + h.epsilon) + h.weight_decay * theta[i]);
    }
  }
};

struct sgd_reference {
  std::vector<double> theta, velocity;

  void step(const std::vector<float>& grad, double lr, double momentum, double weight_decay) {
    for (size_t i = 0; i < theta.size(); ++i) {
      const double u = momentum * velocity[i] + grad[i] + weight_decay * theta[i];
      velocity[i] = u;
      theta[i] -= lr * u;
    }
  }
};

// Runs `steps` Adam steps of size n on both the kernel and the reference and compares them.
void run_adam(size_t n, float weight_decay, int steps) {
  k::adam_hyper h;
  h.lr = 1e-2f;
  h.weight_decay = weight_decay;
  std::vector<float> theta = random_values(n, 1, -1.0f, 1.0f);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  adam_reference ref{widen(theta), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (int s = 1; s <= steps; ++s) {
    const auto grad = random_values(n, 100 + s, -1.0f, 1.0f);
    h.step = static_cast<uint64_t>(s);
    k::adam_step(theta, m, v, grad, h);
    ref.step(grad, h);
  }
  check_close(theta, ref.theta, "theta");
  check_close(m, ref.m, "m");
  check_close(v, ref.v, "v");
}

void run_sgd(size_t n, float momentum, float weight_decay, int steps) {
  const float lr = 0.05f;
  std::vector<float> theta = random_values(n, 2, -1.0f, 1.0f);
  std::vector<float> velocity(n, 0.0f);
  sgd_reference ref{widen(theta), std::vector<double>(n, 0.0)};
  for (int s = 1; s <= steps; ++s) {
    const auto grad = random_values(n, 200 + s, -1.0f, 1.0f);
    k::sgd_momentum_step(theta, velocity, grad, lr, momentum, weight_decay);
    ref.step(grad, lr, momentum, weight_decay);
  }
  check_close(theta, ref.theta, "theta");
  if (momentum != 0.0f) check_close(velocity, ref.velocity, "velocity");
}

// Delay compensation in double precision, from the formulas in compensation.hpp.
enum class dc_form { linear, dcasgd, adaptive };

struct compensation_reference {
  std::vector<double> mean_square;

  std::vector<double> apply(dc_form form, const std::vector<float>& grad,
                            const std::vector<float>& now, const std::vector<float>& read,
                            double lambda, double decay = 0.95, double epsilon = 1e-7) {
    std::vector<double> out(grad.size());
    for (size_t i = 0; i < grad.size(); ++i) {
      const double g = grad[i], drift = double(now[i]) - double(read[i]);
      if (form == dc_form::linear) {
        out[i] = g + lambda * drift;
        continue;
      }
      double l = lambda;
      if (form == dc_form::adaptive) {
        mean_square[i] = decay * mean_square[i] + (1.0 - decay) * g * g;
        l = lambda / std::sqrt(mean_square[i] + epsilon);
      }
      out[i] = g + l * g * g * drift;
    }
    return out;
  }
};

// Compensates gradients of size n twice (the second time with the running mean square the
// first left behind) and compares gradient and mean square with the reference after each.
void run_compensation(dc_form form, size_t n) {
  const float lambda = form == dc_form::adaptive ? 0.04f : 0.7f;
  const auto read = random_values(n, 3, -1.0f, 1.0f);
  std::vector<float> mean_square(form == dc_form::adaptive ? n : 0, 0.0f);
  compensation_reference ref{std::vector<double>(n, 0.0)};
  for (int s = 1; s <= 2; ++s) {
    auto now = random_values(n, 300 + s, -1.0f, 1.0f);
    auto grad = random_values(n, 400 + s, -2.0f, 2.0f);
    const auto expected = ref.apply(form, grad, now, read, lambda);
    if (form == dc_form::linear)
      k::compensate_linear(grad, now, read, lambda);
    else if (form == dc_form::dcasgd)
      k::compensate_dcasgd(grad, now, read, lambda);
    else
      k::compensate_dcasgd_adaptive(grad, now, read, lambda, mean_square);
    check_close(grad, expected, "grad");
    if (form == dc_form::adaptive) check_close(mean_square, ref.mean_square, "mean_square");
  }
}

float from_bits(uint32_t bits) {
  return std::bit_cast<float>(bits);
}
uint32_t to_bits(float x) {
  return std::bit_cast<uint32_t>(x);
}

bool half_is_nan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}
bool bf16_is_nan(uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

// IEEE binary16 decoded independently of the kernel: sign, 5-bit exponent, 10-bit mantissa.
double half_reference(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0x1f)
    magnitude = mantissa ? std::nan("") : INFINITY;
  else if (exponent == 0)
    magnitude = std::ldexp(mantissa, -24);
  else
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

}  // namespace

// -- Adam ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(adam_size_0) {
  run_adam(0, 0.0f, 5);
}
BOOST_AUTO_TEST_CASE(adam_size_1) {
  run_adam(1, 0.0f, 5);
}
BOOST_AUTO_TEST_CASE(adam_size_7) {
  run_adam(7, 0.0f, 5);
}
BOOST_AUTO_TEST_CASE(adam_size_1000) {
  run_adam(1000, 0.0f, 5);
}

BOOST_AUTO_TEST_CASE(adam_weight_decay_size_0) {
  run_adam(0, 0.1f, 5);
}
BOOST_AUTO_TEST_CASE(adam_weight_decay_size_1) {
  run_adam(1, 0.1f, 5);
}
BOOST_AUTO_TEST_CASE(adam_weight_decay_size_7) {
  run_adam(7, 0.1f, 5);
}
BOOST_AUTO_TEST_CASE(adam_weight_decay_size_1000) {
  run_adam(1000, 0.1f, 5);
}

BOOST_AUTO_TEST_CASE(adam_first_step_moves_by_about_lr) {
  // With zero state, the bias-corrected first step is lr * g / (|g| + eps) ~ lr * sign(g).
  std::vector<float> theta = {1.0f, 1.0f, 1.0f};
  std::vector<float> m(3, 0.0f), v(3, 0.0f);
  const std::vector<float> grad = {0.5f, -2.0f, 1e-3f};
  k::adam_hyper h;
  h.lr = 1e-3f;
  k::adam_step(theta, m, v, grad, h);
  BOOST_TEST(theta[0] == 1.0f - 1e-3f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(theta[1] == 1.0f + 1e-3f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(theta[2] == 1.0f - 1e-3f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(adam_zero_gradient_changes_nothing) {
  std::vector<float> theta = {0.25f, -3.0f};
  std::vector<float> m(2, 0.0f), v(2, 0.0f);
  const std::vector<float> grad(2, 0.0f);
  k::adam_step(theta, m, v, grad, k::adam_hyper{});
  BOOST_TEST(theta == (std::vector<float>{0.25f, -3.0f}), boost::test_tools::per_element());
  BOOST_TEST(m == std::vector<float>(2, 0.0f), boost::test_tools::per_element());
  BOOST_TEST(v == std::vector<float>(2, 0.0f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(adam_late_step_matches_reference) {
  // Bias correction at a large step count, where 1 - beta^t is close to 1.
  std::vector<float> theta = {0.5f, -0.5f, 2.0f};
  std::vector<float> m = {0.1f, -0.2f, 0.0f}, v = {0.01f, 0.04f, 1e-6f};
  const std::vector<float> grad = {0.3f, 0.1f, -0.7f};
  k::adam_hyper h;
  h.step = 10000;
  adam_reference ref{widen(theta), widen(m), widen(v)};
  k::adam_step(theta, m, v, grad, h);
  ref.step(grad, h);
  check_close(theta, ref.theta, "theta");
}

// -- SGD with momentum --------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(sgd_size_0) {
  run_sgd(0, 0.0f, 0.0f, 5);
}
BOOST_AUTO_TEST_CASE(sgd_size_1) {
  run_sgd(1, 0.0f, 0.0f, 5);
}
BOOST_AUTO_TEST_CASE(sgd_size_7) {
  run_sgd(7, 0.0f, 0.0f, 5);
}
BOOST_AUTO_TEST_CASE(sgd_size_1000) {
  run_sgd(1000, 0.0f, 0.0f, 5);
}

BOOST_AUTO_TEST_CASE(sgd_momentum_size_0) {
  run_sgd(0, 0.9f, 0.0f, 5);
}
BOOST_AUTO_TEST_CASE(sgd_momentum_size_1) {
  run_sgd(1, 0.9f, 0.0f, 5);
}
BOOST_AUTO_TEST_CASE(sgd_momentum_size_7) {
  run_sgd(7, 0.9f, 0.0f, 5);
}
BOOST_AUTO_TEST_CASE(sgd_momentum_size_1000) {
  run_sgd(1000, 0.9f, 0.0f, 5);
}

BOOST_AUTO_TEST_CASE(sgd_momentum_weight_decay_size_0) {
  run_sgd(0, 0.9f, 0.01f, 5);
}
BOOST_AUTO_TEST_CASE(sgd_momentum_weight_decay_size_1) {
  run_sgd(1, 0.9f, 0.01f, 5);
}
BOOST_AUTO_TEST_CASE(sgd_momentum_weight_decay_size_7) {
  run_sgd(7, 0.9f, 0.01f, 5);
}
BOOST_AUTO_TEST_CASE(sgd_momentum_weight_decay_size_1000) {
  run_sgd(1000, 0.9f, 0.01f, 5);
}

BOOST_AUTO_TEST_CASE(sgd_weight_decay_size_7) {
  run_sgd(7, 0.0f, 0.01f, 5);
}

BOOST_AUTO_TEST_CASE(sgd_without_momentum_needs_no_velocity) {
  std::vector<float> theta = {1.0f, 2.0f};
  const std::vector<float> grad = {0.5f, -1.0f};
  k::sgd_momentum_step(theta, {}, grad, 0.1f, 0.0f, 0.0f);
  BOOST_TEST(theta[0] == 0.95f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(theta[1] == 2.1f, boost::test_tools::tolerance(1e-6f));
}

// -- delay compensation -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(compensate_linear_size_0) {
  run_compensation(dc_form::linear, 0);
}
BOOST_AUTO_TEST_CASE(compensate_linear_size_1) {
  run_compensation(dc_form::linear, 1);
}
BOOST_AUTO_TEST_CASE(compensate_linear_size_7) {
  run_compensation(dc_form::linear, 7);
}
BOOST_AUTO_TEST_CASE(compensate_linear_size_1000) {
  run_compensation(dc_form::linear, 1000);
}

BOOST_AUTO_TEST_CASE(compensate_dcasgd_size_0) {
  run_compensation(dc_form::dcasgd, 0);
}
BOOST_AUTO_TEST_CASE(compensate_dcasgd_size_1) {
  run_compensation(dc_form::dcasgd, 1);
}
BOOST_AUTO_TEST_CASE(compensate_dcasgd_size_7) {
  run_compensation(dc_form::dcasgd, 7);
}
BOOST_AUTO_TEST_CASE(compensate_dcasgd_size_1000) {
  run_compensation(dc_form::dcasgd, 1000);
}

BOOST_AUTO_TEST_CASE(compensate_dcasgd_adaptive_size_0) {
  run_compensation(dc_form::adaptive, 0);
}
BOOST_AUTO_TEST_CASE(compensate_dcasgd_adaptive_size_1) {
  run_compensation(dc_form::adaptive, 1);
}
BOOST_AUTO_TEST_CASE(compensate_dcasgd_adaptive_size_7) {
  run_compensation(dc_form::adaptive, 7);
}
BOOST_AUTO_TEST_CASE(compensate_dcasgd_adaptive_size_1000) {
  run_compensation(dc_form::adaptive, 1000);
}

BOOST_AUTO_TEST_CASE(compensation_without_drift_changes_nothing) {
  const std::vector<float> theta = {0.5f, -1.5f, 3.0f};
  const std::vector<float> grad = {0.25f, -2.0f, 1e-3f};
  auto linear = grad, dcasgd = grad, adaptive = grad;
  std::vector<float> mean_square(3, 0.0f);
  k::compensate_linear(linear, theta, theta, 10.0f);
  k::compensate_dcasgd(dcasgd, theta, theta, 10.0f);
  k::compensate_dcasgd_adaptive(adaptive, theta, theta, 10.0f, mean_square);
  BOOST_TEST(linear == grad, boost::test_tools::per_element());
  BOOST_TEST(dcasgd == grad, boost::test_tools::per_element());
  BOOST_TEST(adaptive == grad, boost::test_tools::per_element());
  // The running mean square is updated even when there is nothing to correct.
  BOOST_TEST(mean_square[1] == 0.05f * 4.0f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(compensate_dcasgd_adaptive_first_use_and_custom_decay) {
  // ms = 0.95 * 0 + 0.05 g^2 on the first use; then with decay 0.5 and epsilon 1e-3.
  std::vector<float> grad = {2.0f};
  std::vector<float> mean_square = {0.0f};
  const std::vector<float> now = {1.0f}, read = {0.5f};
  k::compensate_dcasgd_adaptive(grad, now, read, 0.1f, mean_square);
  const double ms1 = 0.05 * 4.0;
  BOOST_TEST(mean_square[0] == ms1, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(grad[0] == 2.0 + 0.1 / std::sqrt(ms1 + 1e-7) * 4.0 * 0.5,
             boost::test_tools::tolerance(1e-6));
  grad = {-1.0f};
  k::compensate_dcasgd_adaptive(grad, now, read, 0.1f, mean_square, 0.5f, 1e-3f);
  const double ms2 = 0.5 * ms1 + 0.5 * 1.0;
  BOOST_TEST(mean_square[0] == ms2, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(grad[0] == -1.0 + 0.1 / std::sqrt(ms2 + 1e-3) * 1.0 * 0.5,
             boost::test_tools::tolerance(1e-6));
}

// -- bf16 ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(bf16_exact_values) {
  BOOST_TEST(k::float_to_bf16(0.0f) == 0x0000u);
  BOOST_TEST(k::float_to_bf16(-0.0f) == 0x8000u);
  BOOST_TEST(k::float_to_bf16(1.0f) == 0x3f80u);
  BOOST_TEST(k::float_to_bf16(-2.0f) == 0xc000u);
  BOOST_TEST(k::float_to_bf16(0.5f) == 0x3f00u);
  BOOST_TEST(k::float_to_bf16(INFINITY) == 0x7f80u);
  BOOST_TEST(k::float_to_bf16(-INFINITY) == 0xff80u);
  BOOST_TEST(k::bf16_to_float(0x3f80u) == 1.0f);
  BOOST_TEST(k::bf16_to_float(0xc040u) == -3.0f);
  BOOST_TEST(std::isinf(k::bf16_to_float(0x7f80u)));
}

BOOST_AUTO_TEST_CASE(bf16_rounds_to_nearest_even) {
  BOOST_TEST(k::float_to_bf16(from_bits(0x3f808000u)) == 0x3f80u);  // tie, down to even
  BOOST_TEST(k::float_to_bf16(from_bits(0x3f818000u)) == 0x3f82u);  // tie, up to even
  BOOST_TEST(k::float_to_bf16(from_bits(0x3f808001u)) == 0x3f81u);  // just above the tie
  BOOST_TEST(k::float_to_bf16(from_bits(0x3f807fffu)) == 0x3f80u);  // just below the tie
  BOOST_TEST(k::float_to_bf16(from_bits(0xbf808001u)) == 0xbf81u);  // negative, away from 0
}

BOOST_AUTO_TEST_CASE(bf16_rounding_carries_into_exponent) {
  BOOST_TEST(k::float_to_bf16(from_bits(0x3fffffffu)) == 0x4000u);  // ~2 - eps rounds to 2
}

BOOST_AUTO_TEST_CASE(bf16_nan_stays_nan) {
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7f8000ffu, 0x7fffffffu}) {
    const uint16_t b = k::float_to_bf16(from_bits(bits));
    BOOST_TEST(bf16_is_nan(b), std::hex << bits << " -> " << b);
    BOOST_TEST(std::isnan(k::bf16_to_float(b)));
  }
  BOOST_TEST(k::float_to_bf16(from_bits(0xff800001u)) >> 15 == 1);  // sign kept
}

BOOST_AUTO_TEST_CASE(bf16_overflow_becomes_inf) {
  BOOST_TEST(k::float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80u);
  BOOST_TEST(k::float_to_bf16(-std::numeric_limits<float>::max()) == 0xff80u);
  BOOST_TEST(k::float_to_bf16(from_bits(0x7f7f7fffu)) == 0x7f7fu);  // below the tie: finite max
}

BOOST_AUTO_TEST_CASE(bf16_subnormals) {
  BOOST_TEST(k::bf16_to_float(0x0001u) == from_bits(0x00010000u));
  BOOST_TEST(k::float_to_bf16(from_bits(0x00010000u)) == 0x0001u);
  BOOST_TEST(k::float_to_bf16(from_bits(0x00008000u)) == 0x0000u);  // tie to even: zero
  BOOST_TEST(k::float_to_bf16(from_bits(0x00018000u)) == 0x0002u);  // tie to even: up
}

BOOST_AUTO_TEST_CASE(bf16_round_trip_of_every_pattern) {
  int mismatches = 0;
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = k::bf16_to_float(b);
    BOOST_TEST_REQUIRE(to_bits(f) == i << 16);  // widening is exact, even for NaN payloads
    const uint16_t back = k::float_to_bf16(f);
    const bool ok = bf16_is_nan(b) ? bf16_is_nan(back) : back == b;
    if (!ok && ++mismatches <= 5) BOOST_TEST(ok, std::hex << b << " -> " << back);
  }
  BOOST_TEST(mismatches == 0);
}

// -- fp16 ---------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(half_exact_values) {
  BOOST_TEST(k::float_to_half(0.0f) == 0x0000u);
  BOOST_TEST(k::float_to_half(-0.0f) == 0x8000u);
  BOOST_TEST(k::float_to_half(1.0f) == 0x3c00u);
  BOOST_TEST(k::float_to_half(-2.0f) == 0xc000u);
  BOOST_TEST(k::float_to_half(0.5f) == 0x3800u);
  BOOST_TEST(k::float_to_half(65504.0f) == 0x7bffu);
  BOOST_TEST(k::float_to_half(std::ldexp(1.0f, -14)) == 0x0400u);  // smallest normal
  BOOST_TEST(k::float_to_half(INFINITY) == 0x7c00u);
  BOOST_TEST(k::float_to_half(-INFINITY) == 0xfc00u);
  BOOST_TEST(k::half_to_float(0x3c00u) == 1.0f);
  BOOST_TEST(k::half_to_float(0xc200u) == -3.0f);
  BOOST_TEST(k::half_to_float(0x7bffu) == 65504.0f);
  BOOST_TEST(k::half_to_float(0x3555u) == 0.333251953125f);
}

BOOST_AUTO_TEST_CASE(half_rounds_to_nearest_even) {
  BOOST_TEST(k::float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00u);      // tie, down
  BOOST_TEST(k::float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02u);  // tie, up
  BOOST_TEST(k::float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01u);
  BOOST_TEST(k::float_to_half(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -20)) == 0x3c00u);
  BOOST_TEST(k::float_to_half(-(1.0f + 3 * std::ldexp(1.0f, -11))) == 0xbc02u);
}

BOOST_AUTO_TEST_CASE(half_rounding_carries_into_exponent) {
  BOOST_TEST(k::float_to_half(2.0f - std::ldexp(1.0f, -12)) == 0x4000u);  // tie: 0x3bff odd
}

BOOST_AUTO_TEST_CASE(half_nan_stays_nan) {
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f802000u}) {
    const uint16_t h = k::float_to_half(from_bits(bits));
    BOOST_TEST(half_is_nan(h), std::hex << bits << " -> " << h);
    BOOST_TEST(std::isnan(k::half_to_float(h)));
  }
  BOOST_TEST(std::isnan(k::half_to_float(0x7c01u)));
  BOOST_TEST(std::isnan(k::half_to_float(0xfe00u)));
}

BOOST_AUTO_TEST_CASE(half_overflow_becomes_inf) {
  BOOST_TEST(k::float_to_half(65519.0f) == 0x7bffu);  // below the tie with 65536
  BOOST_TEST(k::float_to_half(65520.0f) == 0x7c00u);  // tie rounds to even: Inf
  BOOST_TEST(k::float_to_half(1e6f) == 0x7c00u);
  BOOST_TEST(k::float_to_half(-1e6f) == 0xfc00u);
  BOOST_TEST(k::float_to_half(std::numeric_limits<float>::max()) == 0x7c00u);
}

BOOST_AUTO_TEST_CASE(half_subnormals_from_float) {
  BOOST_TEST(k::float_to_half(std::ldexp(1.0f, -24)) == 0x0001u);  // smallest subnormal
  BOOST_TEST(k::float_to_half(std::ldexp(1.0f, -15)) == 0x0200u);
  BOOST_TEST(k::float_to_half(-std::ldexp(1.0f, -24)) == 0x8001u);
  BOOST_TEST(k::float_to_half(std::ldexp(1.0f, -25)) == 0x0000u);     // tie with 0: even
  BOOST_TEST(k::float_to_half(std::ldexp(1.0f, -26)) == 0x0000u);     // underflow
  BOOST_TEST(k::float_to_half(-std::ldexp(1.0f, -26)) == 0x8000u);    // keeps its sign
  BOOST_TEST(k::float_to_half(std::ldexp(3.0f, -25)) == 0x0002u);     // tie: up to even
  BOOST_TEST(k::float_to_half(std::ldexp(5.0f, -25)) == 0x0002u);     // tie: down to even
  BOOST_TEST(k::float_to_half(std::ldexp(1.0001f, -25)) == 0x0001u);  // above the tie
  BOOST_TEST(k::float_to_half(std::numeric_limits<float>::denorm_min()) == 0x0000u);
  // Halfway between the largest subnormal (0x03ff, odd) and the smallest normal: even wins.
  BOOST_TEST(k::float_to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400u);
}

BOOST_AUTO_TEST_CASE(half_subnormals_to_float) {
  BOOST_TEST(k::half_to_float(0x0001u) == std::ldexp(1.0f, -24));
  BOOST_TEST(k::half_to_float(0x8001u) == -std::ldexp(1.0f, -24));
  BOOST_TEST(k::half_to_float(0x03ffu) == std::ldexp(1023.0f, -24));
  BOOST_TEST(k::half_to_float(0x0200u) == std::ldexp(1.0f, -15));
}

BOOST_AUTO_TEST_CASE(half_to_float_of_every_pattern_matches_reference) {
  int mismatches = 0;
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const double expected = half_reference(h);
    const float actual = k::half_to_float(h);
    const bool ok = std::isnan(expected) ? std::isnan(actual)
                                         : static_cast<double>(actual) == expected &&
                                               std::signbit(actual) == std::signbit(expected);
    if (!ok && ++mismatches <= 5) BOOST_TEST(ok, std::hex << h << " -> " << actual);
  }
  BOOST_TEST(mismatches == 0);
}

BOOST_AUTO_TEST_CASE(half_round_trip_of_every_pattern) {
  int mismatches = 0;
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const uint16_t back = k::float_to_half(k::half_to_float(h));
    const bool ok = half_is_nan(h) ? half_is_nan(back) : back == h;
    if (!ok && ++mismatches <= 5) BOOST_TEST(ok, std::hex << h << " -> " << back);
  }
  BOOST_TEST(mismatches == 0);
}

// -- sign compression with error feedback -------------------------------------------------------

BOOST_AUTO_TEST_CASE(sign_compression_sends_signs_and_the_mean_magnitude) {
  const std::vector<float> g = {0.5f, -1.5f, 2.0f, -0.25f, 0.0f, 3.0f, -4.0f, 1.0f, -0.5f};
  std::vector<float> residual(g.size(), 0.0f);
  std::vector<uint8_t> bits(k::sign_bytes(g.size()));
  BOOST_TEST_REQUIRE(bits.size() == 2u);
  const float scale = k::sign_compress(g, residual, bits);
  double mean = 0;
  for (float x : g) mean += std::abs(x) / g.size();
  BOOST_TEST(scale == mean, boost::test_tools::tolerance(1e-6));
  std::vector<float> q(g.size());
  k::sign_decompress(bits, scale, q);
  for (size_t i = 0; i < g.size(); ++i) {
    BOOST_TEST(q[i] == (g[i] >= 0 ? scale : -scale));
    BOOST_TEST(residual[i] == g[i] - q[i], boost::test_tools::tolerance(1e-6f));
  }
}

BOOST_AUTO_TEST_CASE(error_feedback_loses_nothing_over_many_steps) {
  // What was sent plus what is still owed equals everything that was compressed.
  std::mt19937 rng{3};
  std::normal_distribution<float> dist{0.0f, 1.0f};
  const size_t n = 1000;
  std::vector<float> residual(n, 0.0f), sent(n, 0.0f), total(n, 0.0f), g(n), q(n);
  std::vector<uint8_t> bits(k::sign_bytes(n));
  for (int step = 0; step < 50; ++step) {
    for (size_t i = 0; i < n; ++i) {
      g[i] = dist(rng);
      total[i] += g[i];
    }
    k::sign_decompress(bits, k::sign_compress(g, residual, bits), q);
    for (size_t i = 0; i < n; ++i) sent[i] += q[i];
  }
  for (size_t i = 0; i < n; ++i)
    BOOST_TEST(sent[i] + residual[i] == total[i], boost::test_tools::tolerance(1e-3f));
}

BOOST_AUTO_TEST_CASE(sign_compression_of_nothing) {
  std::vector<float> none;
  std::vector<uint8_t> bits;
  BOOST_TEST(k::sign_compress(none, none, bits) == 0.0f);
  BOOST_TEST(k::sign_bytes(0) == 0u);
  BOOST_TEST(k::sign_bytes(8) == 1u);
  BOOST_TEST(k::sign_bytes(9) == 2u);
}

// The vectorised passes (vector_ops.hpp) against plain loops, at lengths around the vector
// widths, with a bad value at every position of a short vector.
BOOST_AUTO_TEST_CASE(vector_ops_match_plain_loops) {
  std::mt19937 rng{7};
  std::normal_distribution<float> normal{0.0f, 3.0f};
  for (size_t n : {0, 1, 7, 8, 9, 31, 33, 1000, 4097}) {
    std::vector<float> x(n);
    for (auto& v : x) v = normal(rng);
    double want = 0;
    for (float v : x) want += double(v) * double(v);
    BOOST_TEST(std::abs(troupe::kernels::sum_of_squares(x) - want) <= 1e-12 * (1 + want));
    BOOST_TEST(!troupe::kernels::first_beyond(x, 1e15f).has_value());
    auto scaled = x;
    BOOST_TEST(troupe::kernels::scale_within(scaled, 0.5f, 1e15f));
    for (size_t i = 0; i < n; ++i) BOOST_TEST_REQUIRE(scaled[i] == x[i] * 0.5f);
  }
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(), -2e15f};
  for (float b : bad)
    for (size_t at = 0; at < 19; ++at) {
      std::vector<float> x(19, 1.0f);
      x[at] = b;
      BOOST_TEST(troupe::kernels::first_beyond(x, 1e15f).value_or(99) == at);
      BOOST_TEST(!troupe::kernels::scale_within(x, 1.0f, 1e15f));
    }
  std::vector<float> big(10, 1e30f);  // finite, but beyond the limit once scaled
  BOOST_TEST(!troupe::kernels::scale_within(big, 1e10f, std::numeric_limits<float>::max()));
}
