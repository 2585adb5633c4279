#include "kernels/cpu/inverse_root.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "troupe/error.hpp"

extern "C" void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda,
                        double* w, double* work, const int* lwork, int* iwork, const int* liwork,
                        int* info);

namespace troupe::kernels {

namespace {

using matrix = std::vector<float>;

// c = alpha a b + beta c, all n x n row-major.
void gemm(const matrix& a, const matrix& b, matrix& c, size_t n, float alpha = 1.0f,
          float beta = 0.0f) {
  const int m = static_cast<int>(n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, alpha, a.data(), m, b.data(), m,
              beta, c.data(), m);
}

// s I + t m
matrix shifted(const matrix& m, size_t n, float s, float t) {
  matrix out(n * n);
  for (size_t i = 0; i < n * n; ++i) out[i] = t * m[i];
  for (size_t i = 0; i < n; ++i) out[i * n + i] += s;
  return out;
}

double distance_from_identity(const matrix& m, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      worst = std::max(worst, std::abs(double(m[i * n + j]) - (i == j ? 1.0 : 0.0)));
  return worst;
}

// Reference: V diag(w^{-1/p}) V^T in double precision.
caf::error evd_root(const matrix& a, size_t n, int p, std::span<float> out) {
  std::vector<double> v(a.begin(), a.end()), w(n);
  const int size = static_cast<int>(n);
  int lwork = -1, liwork = -1, info = 0, iwork_size = 0;
  double work_size = 0;
  dsyevd_("V", "U", &size, v.data(), &size, w.data(), &work_size, &lwork, &iwork_size, &liwork,
          &info);
  lwork = static_cast<int>(work_size);
  liwork = iwork_size;
  std::vector<double> work(static_cast<size_t>(std::max(lwork, 1)));
  std::vector<int> iwork(static_cast<size_t>(std::max(liwork, 1)));
  dsyevd_("V", "U", &size, v.data(), &size, w.data(), work.data(), &lwork, iwork.data(), &liwork,
          &info);
  if (info != 0) return make_error(errc::non_finite, "the eigendecomposition did not converge");
  // dsyevd leaves eigenvector j in column j of the column-major v, which is row j of v read
  // row-major: out = V diag(w^{-1/p}) V^T = v^T (diag(w^{-1/p}) v) in row-major terms.
  std::vector<double> scaled(v.size()), result(v.size());
  for (size_t j = 0; j < n; ++j) {
    const double s = std::pow(std::max(w[j], 1e-300), -1.0 / p);
    for (size_t i = 0; i < n; ++i) scaled[j * n + i] = s * v[j * n + i];
  }
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, size, size, size, 1.0, v.data(), size,
              scaled.data(), size, 0.0, result.data(), size);
  for (size_t i = 0; i < result.size(); ++i) out[i] = static_cast<float>(result[i]);
  return {};
}

// out = m^p, by squaring where p is a power of two (p = 4: two GEMMs instead of three).
void raise_to(const matrix& m, int p, matrix& out, matrix& scratch, size_t n) {
  out = m;
  int have = 1;
  while (have * 2 <= p) {
    gemm(out, out, scratch, n);
    std::swap(out, scratch);
    have *= 2;
  }
  for (; have < p; ++have) {
    gemm(out, m, scratch, n);
    std::swap(out, scratch);
  }
}

// X = A^{-1/p} with M = X^p A driven to I (Guo & Higham): z = (1 + p) / (2 lambda_max),
// X0 = z^{1/p} I, M0 = z A; Mi = ((p + 1) I - M) / p, X <- X Mi, M <- Mi^p M.
root_outcome coupled_newton(const matrix& a, size_t n, int p, double lambda_max,
                            const root_options& o, std::span<float> out) {
  const double z = (1.0 + p) / (2.0 * lambda_max);
  matrix m = shifted(a, n, 0.0f, static_cast<float>(z));
  matrix x = shifted(matrix(n * n, 0.0f), n, static_cast<float>(std::pow(z, 1.0 / p)), 0.0f);
  matrix step(n * n), power(n * n), scratch(n * n);
  root_outcome outcome;
  double previous = distance_from_identity(m, n);
  for (; outcome.iterations < o.max_iterations && previous > o.tolerance; ++outcome.iterations) {
    step = shifted(m, n, static_cast<float>(p + 1) / p, -1.0f / p);
    gemm(x, step, scratch, n);
    std::swap(x, scratch);
    raise_to(step, p, power, scratch, n);
    gemm(power, m, scratch, n);
    std::swap(m, scratch);
    const double now = distance_from_identity(m, n);
    if (now >= previous && now < 1e-3) {  // fp32 has no more to give
      previous = now;
      ++outcome.iterations;
      break;
    }
    previous = now;
  }
  outcome.residual = previous;
  int per_power = 0;  // GEMMs raise_to spends on p
  for (int have = 1; have < p; have = have * 2 <= p ? have * 2 : have + 1) ++per_power;
  outcome.gemm_flops = double(outcome.iterations) * (per_power + 2) * 2.0 * double(n) * n * n;
  std::copy(x.begin(), x.end(), out.begin());
  return outcome;
}

// Coupled Newton-Schulz for a with eigenvalues in (0, 1]: y -> a^{1/2}, z -> a^{-1/2}.
// t = (3 I - z y) / 2, y <- y t, z <- t z.
root_outcome schulz(matrix& y, matrix& z, size_t n, const root_options& o) {
  matrix zy(n * n), t(n * n), scratch(n * n);
  root_outcome outcome;
  double previous = 1e300;
  for (; outcome.iterations < o.max_iterations; ++outcome.iterations) {
    gemm(z, y, zy, n);
    const double now = distance_from_identity(zy, n);
    if (now < o.tolerance || (now >= previous && now < 1e-3)) {
      previous = now;
      break;
    }
    previous = now;
    t = shifted(zy, n, 1.5f, -0.5f);
    gemm(y, t, scratch, n);
    std::swap(y, scratch);
    gemm(t, z, scratch, n);
    std::swap(z, scratch);
  }
  outcome.residual = previous;
  outcome.gemm_flops = (3.0 * outcome.iterations + 1) * 2.0 * double(n) * n * n;
  return outcome;
}

// A^{-1/4} = c^{-1/4} (A / c)^{-1/4}, c >= lambda_max: the first stage gives (A / c)^{-1/2}
// (with its square root), the second the square root of that, scaled into (0, 1] by s, an
// upper bound of its largest eigenvalue: (A / c)^{-1/4} = s^{1/2} ((A / c)^{-1/2} / s)^{1/2}.
// Taking the root of the inverse (not the inverse of the root) keeps fp32 accurate along the
// smallest eigenvalues, which dominate A^{-1/4}.
root_outcome newton_db(const matrix& a, size_t n, double lambda_max, const root_options& o,
                       std::span<float> out) {
  const float c = static_cast<float>(lambda_max);
  matrix y = shifted(a, n, 0.0f, 1.0f / c);
  matrix z = shifted(matrix(n * n, 0.0f), n, 1.0f, 0.0f);
  const root_outcome first = schulz(y, z, n, o);  // z = (A/c)^{-1/2}
  const float s = static_cast<float>(largest_eigenvalue(z, n) * 1.01);
  y = shifted(z, n, 0.0f, 1.0f / s);
  z = shifted(matrix(n * n, 0.0f), n, 1.0f, 0.0f);
  const root_outcome second = schulz(y, z, n, o);  // y = ((A/c)^{-1/2} / s)^{1/2}
  const float scale = std::sqrt(s) * std::pow(c, -0.25f);
  for (size_t r = 0; r < n; ++r)  // symmetric by construction; average out the rounding
    for (size_t col = 0; col < n; ++col)
      out[r * n + col] = scale * 0.5f * (y[r * n + col] + y[col * n + r]);
  return root_outcome{first.iterations + second.iterations, second.residual,
                      first.gemm_flops + second.gemm_flops};
}

// x^{-1/p} on [lo, 1] as a Chebyshev series (coefficients from degree + 1 nodes, in double),
// applied to B = A / c by Clenshaw's recurrence on T = (2 B - (1 + lo) I) / (1 - lo):
// b_k = 2 T b_{k+1} - b_{k+2} + c_k I, result T b_1 - b_2 + c_0 I; then A^{-1/p} = c^{-1/p}
// times that.
root_outcome chebyshev(const matrix& a, size_t n, int p, double c, double lo, const root_options& o,
                       std::span<float> out) {
  constexpr double pi = 3.14159265358979323846;
  const int d = o.degree;
  const int nodes = d + 1;
  std::vector<double> f(nodes), coefficients(d + 1);
  for (int j = 0; j < nodes; ++j) {
    const double x = std::cos(pi * (j + 0.5) / nodes);
    f[j] = std::pow(((1.0 - lo) * x + (1.0 + lo)) / 2.0, -1.0 / p);
  }
  for (int k = 0; k <= d; ++k) {
    double sum = 0;
    for (int j = 0; j < nodes; ++j) sum += f[j] * std::cos(pi * k * (j + 0.5) / nodes);
    coefficients[k] = (k == 0 ? 1.0 : 2.0) * sum / nodes;
  }
  const matrix t = shifted(a, n, static_cast<float>(-(1.0 + lo) / (1.0 - lo)),
                           static_cast<float>(2.0 / (c * (1.0 - lo))));
  matrix next(n * n, 0.0f), after(n * n, 0.0f), b(n * n);  // b_{k+1}, b_{k+2}, b_k
  for (int k = d; k >= 1; --k) {
    b = shifted(after, n, static_cast<float>(coefficients[k]), -1.0f);
    gemm(t, next, b, n, 2.0f, 1.0f);
    std::swap(after, next);
    std::swap(next, b);
  }
  b = shifted(after, n, static_cast<float>(coefficients[0]), -1.0f);
  gemm(t, next, b, n, 1.0f, 1.0f);
  const float scale = static_cast<float>(std::pow(c, -1.0 / p));
  for (size_t i = 0; i < n * n; ++i) out[i] = scale * b[i];
  return root_outcome{d, 0.0, double(d) * 2.0 * double(n) * n * n};
}

double frobenius(const matrix& a) {
  double sum = 0;
  for (float x : a) sum += double(x) * double(x);
  return std::sqrt(sum);
}

}  // namespace

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

caf::expected<root_outcome> inverse_root(std::span<const float> a, size_t n, int p,
                                         std::span<float> out, const root_options& o) {
  if (n == 0 || a.size() != n * n || out.size() != n * n || p < 1)
    return make_error(errc::shape_mismatch, "inverse_root: an n x n matrix and p >= 1");
  for (float x : a)
    if (!std::isfinite(x)) return make_error(errc::non_finite, "inverse_root: non-finite input");
  if (o.solver == root_solver::chebyshev && o.degree < 1)
    return make_error(errc::bad_configuration, "the chebyshev degree must be at least 1");
  if (o.solver == root_solver::newton_db && p != 4)
    return make_error(errc::bad_configuration, "newton_db computes inverse 4th roots only");
  matrix damped(a.begin(), a.end());
  const matrix plain = damped;
  double lambda =
      o.scaling == root_scaling::frobenius ? frobenius(plain) : largest_eigenvalue(a, n) * 1.01;
  if (!(lambda > 0)) lambda = 1.0;  // a zero matrix: the damping alone is left
  const float damping = static_cast<float>(o.epsilon * lambda);
  for (size_t i = 0; i < n; ++i) damped[i * n + i] += damping;
  lambda += damping;
  switch (o.solver) {
    case root_solver::evd:
      if (auto err = evd_root(damped, n, p, out)) return err;
      return root_outcome{};
    case root_solver::coupled_newton:
      return coupled_newton(damped, n, p, lambda, o, out);
    case root_solver::newton_db:
      return newton_db(damped, n, lambda, o, out);
    case root_solver::chebyshev:  // the damping bounds the spectrum from below
      return chebyshev(damped, n, p, lambda, damping / lambda, o, out);
  }
  return make_error(errc::bad_configuration, "unknown solver");
}

const char* to_string(root_solver s) {
  switch (s) {
    case root_solver::evd:
      return "evd";
    case root_solver::coupled_newton:
      return "cn";
    case root_solver::newton_db:
      return "ndb";
    case root_solver::chebyshev:
      return "cheb";
  }
  return "?";
}

}  // namespace troupe::kernels
