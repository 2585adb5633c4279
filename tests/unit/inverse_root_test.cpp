// Unit tests of the inverse p-th root solvers (kernels/cpu/inverse_root): on random SPD
// matrices of sizes 1, 7, 64 and 256 with condition numbers 1e2 to 1e6, each iterative
// solver's inverse 4th root is within 1e-3 relative (Frobenius) error of the double-precision
// eigendecomposition, and the Chebyshev series on the interval
// its damping gives; the reference itself inverts a diagonal matrix exactly; bad input is
// refused.
#define BOOST_TEST_MODULE inverse_root
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/inverse_root.hpp"
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
      for (root_solver s : {root_solver::coupled_newton, root_solver::newton_db}) {
        const double error = relative_error(root_of(a, n, s), reference);
        BOOST_TEST(error <= 1e-3, to_string(s) << " n " << n << " condition " << condition
                                               << ": relative error " << error);
        BOOST_TEST_MESSAGE(to_string(s) << " n " << n << " condition " << condition
                                        << ": relative error " << error);
      }
    }
}

BOOST_AUTO_TEST_CASE(chebyshev_matches_the_eigendecomposition_on_its_interval) {
  // Its interval starts at the damping: with epsilon 1e-2 the damped matrices have condition
  // at most about 1e2, and degree 64 suffices whatever the original condition.
  for (size_t n : {1u, 7u, 64u, 256u})
    for (double condition : {1e2, 1e4, 1e6}) {
      const auto a = random_spd(n, condition, static_cast<unsigned>(n * 31 + condition));
      const double error = relative_error(root_of(a, n, root_solver::chebyshev, 1e-2f),
                                          root_of(a, n, root_solver::evd, 1e-2f));
      BOOST_TEST(error <= 1e-3, "n " << n << " condition " << condition << ": " << error);
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
