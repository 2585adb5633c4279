// Unit tests of the inverse p-th root solvers (kernels/cpu/inverse_root): on random SPD
// matrices of sizes 1, 7, 64 and 256 with condition numbers 1e2 to 1e6, each iterative
// solver's inverse 4th root is within 1e-3 relative (Frobenius) error of the double-precision
// eigendecomposition; the reference itself inverts a diagonal matrix exactly; Lanczos's
// estimates lie inside the spectrum; a chosen step keeps the interval's image in (0, 1] and
// lifts its lower end faster than a classic one; the GPU's schedule converges; rank-deficient
// statistics are rooted as the reference; bad input is refused.
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
      const polynomial_step half = choose_step(lo / 2, 0.5, q);  // the same, scaled
      BOOST_TEST(half.pole == t.pole / 2, boost::test_tools::tolerance(1e-6));
      BOOST_TEST(half.next_lo == t.next_lo, boost::test_tools::tolerance(1e-6));
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

BOOST_AUTO_TEST_CASE(without_a_lower_bound_the_step_is_classic) {
  const polynomial_step t = choose_step(0.0, 1.0, 4);
  BOOST_TEST(t.pole == 5.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(t.gain == 1.25, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(t.next_lo == 0.0);  // nothing is known yet, and nothing is claimed
  BOOST_TEST(choose_step(1.0, 1.0, 4).next_lo == 1.0);
}

BOOST_AUTO_TEST_CASE(a_schedule_for_a_sure_interval_converges_it) {
  // The GPU's roots: one schedule for every block, from the damping's bound.
  const auto steps = newton_schedule(1e-6, 4, 3, 25);
  BOOST_TEST(steps.size() <= 14u);  // classic steps alone: about 19
  double lo = 1e-6;
  for (const auto& t : steps) lo = t.next_lo;
  BOOST_TEST(lo >= 0.999);
  BOOST_TEST(newton_schedule(0.0, 4, 3, 25).size() == 25u);  // no bound: classic, to the cap
  BOOST_TEST(newton_schedule(1e-6, 4, 3, 5).size() == 5u);
}

BOOST_AUTO_TEST_CASE(rank_deficient_statistics_are_rooted_as_the_reference) {
  // One step's statistics: G G^T of a 128 x 16 gradient, rank 16; the damping sets the rest,
  // and the root is dominated by those 112 eigenvalues. fp32 rounds the matrix by about 6e-8
  // of its largest eigenvalue, which is a fraction of the damping: the error is about
  // 4.5e-9 / epsilon for every fp32 solver (4.5e-3 at 1e-6), so 1e-3 needs epsilon >= 1e-5.
  const size_t n = 128, k = 16;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> g(n * k), a(n * n, 0.0f);
  for (auto& x : g) x = normal(rng);
  for (size_t r = 0; r < n; ++r)
    for (size_t c = 0; c < n; ++c)
      for (size_t j = 0; j < k; ++j) a[r * n + c] += g[r * k + j] * g[c * k + j];
  for (float epsilon : {1e-5f, 1e-4f}) {
    const auto reference = root_of(a, n, root_solver::evd, epsilon);
    for (root_solver s :
         {root_solver::coupled_newton, root_solver::newton_db, root_solver::chebyshev}) {
      const double error = relative_error(root_of(a, n, s, epsilon), reference);
      BOOST_TEST(error <= 1e-3, to_string(s) << " " << epsilon << ": relative error " << error);
    }
  }
}

BOOST_AUTO_TEST_CASE(chosen_steps_take_fewer_than_classic_ones) {
  const size_t n = 64;
  const auto a = random_spd(n, 1e6, 3);
  std::vector<float> out(n * n);
  root_options o;
  auto done = inverse_root(a, n, 4, out, o);
  BOOST_TEST_REQUIRE(static_cast<bool>(done));
  BOOST_TEST(done->iterations <= 14, done->iterations);  // classic Newton: 17 to 19
  BOOST_TEST(done->residual <= 1e-2);
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
  o.degree = 16;
  o.epsilon = 0.0f;  // a series needs a sure lower end
  BOOST_TEST(testing::fails_with(inverse_root(a, 2, 4, out, o), errc::bad_configuration));
}
