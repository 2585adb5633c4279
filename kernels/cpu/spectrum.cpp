#include "kernels/cpu/spectrum.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

extern "C" void dstev_(const char* jobz, const int* n, double* d, double* e, double* z,
                       const int* ldz, double* work, int* info);

namespace troupe::kernels {

double largest_eigenvalue(std::span<const float> a, size_t n, int iterations) {
  std::vector<float> v(n), next(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);  // positive: no start orthogonal to it
  for (auto& x : v) x = u(rng);
  const int size = static_cast<int>(n);
  double lambda = 0;
  for (int it = 0; it < iterations; ++it) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, size, size, 1.0f, a.data(), size, v.data(), 1, 0.0f,
                next.data(), 1);
    double norm = 0, rayleigh = 0, vv = 0;
    for (size_t r = 0; r < n; ++r) {
      norm += double(next[r]) * next[r];
      rayleigh += double(v[r]) * next[r];
      vv += double(v[r]) * v[r];
    }
    norm = std::sqrt(norm);
    if (norm == 0) return 0;
    const double previous = lambda;
    lambda = rayleigh / vv;
    for (size_t r = 0; r < n; ++r) v[r] = static_cast<float>(next[r] / norm);
    if (it > 3 && std::abs(lambda - previous) <= 1e-4 * std::abs(lambda)) break;
  }
  return lambda;
}

namespace {

// w -= (w . v_j) v_j for every basis vector, twice (classical Gram-Schmidt, repeated).
void orthogonalise(std::vector<double>& w, const std::vector<std::vector<double>>& basis) {
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& v : basis) {
      double dot = 0;
      for (size_t i = 0; i < w.size(); ++i) dot += w[i] * v[i];
      for (size_t i = 0; i < w.size(); ++i) w[i] -= dot * v[i];
    }
}

double norm_of(const std::vector<double>& w) {
  double sum = 0;
  for (double x : w) sum += x * x;
  return std::sqrt(sum);
}

}  // namespace

ritz_extremes lanczos_extremes(std::span<const float> a, size_t n, int steps) {
  const int k_max = static_cast<int>(std::min<size_t>(n, static_cast<size_t>(std::max(steps, 1))));
  std::vector<std::vector<double>> basis;
  std::vector<double> alpha, beta;  // the tridiagonal's diagonal and off-diagonal
  std::vector<double> w(n);
  double largest_alpha = 1e-300;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (auto& x : w) x = u(rng);
  std::vector<float> v32(n), av(n);
  const int size = static_cast<int>(n);
  for (int k = 0; k < k_max; ++k) {
    const double norm = norm_of(w);
    if (k > 0 && norm <= 1e-10 * largest_alpha) break;  // an invariant subspace: exact
    if (k > 0) beta.push_back(norm);
    for (auto& x : w) x /= norm;
    basis.push_back(w);
    for (size_t i = 0; i < n; ++i) v32[i] = static_cast<float>(w[i]);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, size, size, 1.0f, a.data(), size, v32.data(), 1, 0.0f,
                av.data(), 1);
    double dot = 0;
    for (size_t i = 0; i < n; ++i) dot += double(av[i]) * w[i];
    alpha.push_back(dot);
    largest_alpha = std::max(largest_alpha, std::abs(dot));
    for (size_t i = 0; i < n; ++i) w[i] = av[i];
    orthogonalise(w, basis);
  }
  int m = static_cast<int>(alpha.size()), info = 0, one = 1;
  beta.resize(static_cast<size_t>(std::max(m - 1, 0)));
  beta.push_back(0.0);  // dstev's work space for e has n entries
  double unused = 0;
  dstev_("N", &m, alpha.data(), beta.data(), &unused, &one, &unused, &info);
  if (info != 0 || m == 0) return {};
  return {alpha.front(), alpha.back()};  // ascending on success
}

}  // namespace troupe::kernels
