// Unit tests of the inverse p-th root solvers (kernels/cpu/inverse_root): on random SPD
// matrices of sizes 1, 7, 64 and 256 with condition numbers 1e2 to 1e6, each iterative
// solver's inverse 4th root is within 1e-3 relative (Frobenius) error of the double-precision
// eigendecomposition; the reference itself inverts a diagonal matrix exactly; Lanczos's
// estimates lie inside the spectrum; a chosen step keeps the interval's image in (0, 1] and
// lifts its lower end; bad input is refused.
#define BOOST_TEST_MODULE inverse_root
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/inverse_root.hpp"
#include "kernels/cpu/spectrum.hpp"
#include "tests/unit/expect_error.hpp"

using namespace troupe;
using namespace troupe::kernels;

namespace {

// Q diag(lambda) Q^T with Q a random orthogonal matrix (Gram-Schmidt in double) and lambda
// spread log-evenly from 1 down to 1 / condition.
std::vector<float> random_spd(size_t n, double condition, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> q(n * n);
  for (auto& x : q) x = normal(rng);
  for (size_t j = 0; j < n; ++j) {  // columns j of q, orthonormal
    for (size_t k = 0; k < j; ++k) {
      double dot = 0;
      for (size_t i = 0; i < n; ++i) dot += q[i * n + j] * q[i * n + k];
      for (size_t i = 0; i < n; ++i) q[i * n + j] -= dot * q[i * n + k];
    }
    double norm = 0;
    for (size_t i = 0; i < n; ++i) norm += q[i * n + j] * q[i * n + j];
    for (size_t i = 0; i < n; ++i) q[i * n + j] /= std::sqrt(norm);
  }
  std::vector<double> lambda(n);
  for (size_t j = 0; j < n; ++j)
    lambda[j] = n == 1 ? 1.0 : std::pow(condition, -double(j) / double(n - 1));
  std::vector<float> a(n * n);
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c < n; ++c) {
      double sum = 0;
      for (size_t j = 0; j < n; ++j) sum += q[r * n + j] * lambda[j] * q[c * n + j];
      a[r * n + c] = static_cast<float>(sum);
    }
  for (size_t r = 0; r < n; ++r)  // exactly symmetric
    for (size_t c = 0; c < r; ++c) a[r * n + c] = a[c * n + r];
  return a;
}

double relative_error(const std::vector<float>& x, const std::vector<float>& reference) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (double(x[i]) - reference[i]) * (double(x[i]) - reference[i]);
    norm += double(reference[i]) * reference[i];
  }
  return std::sqrt(diff / norm);
}

std::vector<float> root_of(const std::vector<float>& a, size_t n, root_solver solver,
                           float epsilon = 1e-6f) {
  std::vector<float> out(n * n);
  root_options o;
  o.solver = solver;
  o.epsilon = epsilon;
  auto done = inverse_root(a, n, 4, out, o);
  BOOST_TEST_REQUIRE(static_cast<bool>(done));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_reference_inverts_a_diagonal_exactly) {
  const std::vector<float> a = {16.0f, 0.0f, 0.0f, 0.0f, 81.0f, 0.0f, 0.0f, 0.0f, 1.0f};
  std::vector<float> out(9);
  root_options o;
  o.solver = root_solver::evd;
  o.epsilon = 0.0f;
  BOOST_TEST_REQUIRE(static_cast<bool>(inverse_root(a, 3, 4, out, o)));
  BOOST_TEST(out[0] == 0.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(out[4] == 1.0f / 3.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(out[8] == 1.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(out[1] == 0.0f);
}

BOOST_AUTO_TEST_CASE(iterative_solvers_match_the_eigendecomposition) {
  for (size_t n : {1u, 7u, 64u, 256u})
    for (double condition : {1e2, 1e4, 1e6}) {
      const auto a = random_spd(n, condition, static_cast<unsigned>(n * 31 + condition));
      const auto reference = root_of(a, n, root_solver::evd);
      for (root_solver s :
           {root_solver::coupled_newton, root_solver::newton_db, root_solver::chebyshev}) {
        const double error = relative_error(root_of(a, n, s), reference);
        BOOST_TEST(error <= 1e-3, to_string(s) << " n " << n << " condition " << condition
                                               << ": relative error " << error);
        BOOST_TEST_MESSAGE(to_string(s) << " n " << n << " condition " << condition
                                        << ": relative error " << error);
      }
    }
}

BOOST_AUTO_TEST_CASE(lanczos_brackets_the_spectrum_from_inside) {
  for (double condition : {1e1, 1e3, 1e6}) {
    const size_t n = 64;
    const auto a = random_spd(n, condition, 5);  // eigenvalues 1 ... 1 / condition
    const ritz_extremes ritz = lanczos_extremes(a, n);
    BOOST_TEST(ritz.largest <= 1.0 + 1e-5);
    BOOST_TEST(ritz.largest >= 0.99);
    BOOST_TEST(ritz.smallest >= (1.0 / condition) * (1.0 - 1e-3));
    BOOST_TEST(ritz.smallest <= 1.0 / std::sqrt(condition), condition << ": " << ritz.smallest);
  }
}

BOOST_AUTO_TEST_CASE(a_chosen_step_maps_the_interval_into_its_image_and_lifts_the_bottom) {
  for (int q : {2, 4})
    for (double lo : {1e-6, 1e-3, 0.1, 0.9, 1.0}) {
      const polynomial_step t = choose_step(lo, 1.0, q);
      auto image = [&](double m) { return m * std::pow(t.gain * (1.0 - m / t.pole), q); };
      BOOST_TEST(t.pole >= 1.25);  // T stays positive a quarter beyond the interval
      const polynomial_step classic = choose_step(1.0, 1.0, q);  // pole (q + 1), Newton's
      const double classic_lo = lo * std::pow(classic.gain * (1.0 - lo / classic.pole), q);
      BOOST_TEST(t.next_lo >= classic_lo * (1.0 - 1e-9), q << " " << lo << ": " << t.next_lo);
      if (lo <= 1e-3) BOOST_TEST(t.next_lo >= 2.0 * classic_lo, q << " " << lo);
      for (int i = 0; i <= 100; ++i) {
        const double m = lo + (1.0 - lo) * i / 100.0;
        BOOST_TEST(image(m) <= 1.0 + 1e-9);
        BOOST_TEST(image(m) >= t.next_lo * (1.0 - 1e-9));
        const double below = lo * i / 100.0;     // eigenvalues the estimate missed: they rise,
        BOOST_TEST(image(below) <= 1.0 + 1e-9);  // and never past the top
        BOOST_TEST(image(below) >= below);
      }
    }
}

BOOST_AUTO_TEST_CASE(bad_input_is_refused) {
  std::vector<float> out(4);
  root_options o;
  std::vector<float> a = {1.0f, 0.0f, 0.0f, NAN};
  BOOST_TEST(testing::fails_with(inverse_root(a, 2, 4, out, o), errc::non_finite));
  a = {1.0f, 0.0f, 0.0f};
  BOOST_TEST(testing::fails_with(inverse_root(a, 2, 4, out, o), errc::shape_mismatch));
  a = {1.0f, 0.0f, 0.0f, 1.0f};
  o.solver = root_solver::newton_db;
  BOOST_TEST(testing::fails_with(inverse_root(a, 2, 2, out, o), errc::bad_configuration));
  o.solver = root_solver::chebyshev;
  o.degree = 0;
  BOOST_TEST(testing::fails_with(inverse_root(a, 2, 4, out, o), errc::bad_configuration));
}
