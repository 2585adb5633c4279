#include "kernels/cpu/inverse_root.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/spectrum.hpp"
#include "kernels/status.hpp"

extern "C" void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda,
                        double* w, double* work, const int* lwork, int* iwork, const int* liwork,
                        int* info);

namespace troupe::kernels {

namespace {

using matrix = std::vector<float>;

struct spectrum_interval {
  double lo = 0, hi = 1;
};

// c = alpha a b + beta c, all n x n row-major.
void gemm(const matrix& a, const matrix& b, matrix& c, size_t n, float alpha = 1.0f,
          float beta = 0.0f) {
  const int m = static_cast<int>(n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, alpha, a.data(), m, b.data(), m,
              beta, c.data(), m);
}

// out = s I + t m, into out's storage (the iterations' steps reuse theirs).
void shift(const matrix& m, size_t n, float s, float t, matrix& out) {
  out.resize(n * n);
  for (size_t i = 0; i < n * n; ++i) out[i] = t * m[i];
  for (size_t i = 0; i < n; ++i) out[i * n + i] += s;
}

matrix shifted(const matrix& m, size_t n, float s, float t) {
  matrix out;
  shift(m, n, s, t, out);
  return out;
}

// s I
matrix scaled_identity(size_t n, float s) {
  matrix out(n * n, 0.0f);
  for (size_t i = 0; i < n; ++i) out[i * n + i] = s;
  return out;
}

// Reference: V diag(w^{-1/p}) V^T in double precision.
status evd_root(const matrix& a, size_t n, int p, std::span<float> out) {
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
  if (info != 0) return failure(errc::non_finite, "the eigendecomposition did not converge");
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

// c = a a^T for symmetric a (so a^2), both halves: SYRK does half a GEMM's FLOPs.
void square(const matrix& a, matrix& c, size_t n) {
  const int m = static_cast<int>(n);
  cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, m, m, 1.0f, a.data(), m, 0.0f, c.data(), m);
  for (size_t r = 1; r < n; ++r)
    for (size_t col = 0; col < r; ++col) c[r * n + col] = c[col * n + r];
}

// m = (m + m^T) / 2: products of commuting symmetric matrices drift from symmetry by rounding.
void symmetrise(matrix& m, size_t n) {
  for (size_t r = 1; r < n; ++r)
    for (size_t col = 0; col < r; ++col) {
      const float mean = 0.5f * (m[r * n + col] + m[col * n + r]);
      m[r * n + col] = mean;
      m[col * n + r] = mean;
    }
}

// out = t^p for symmetric t: squares (SYRK) while they fit, then GEMMs. Returns the FLOPs.
double raise_to(const matrix& t, int p, matrix& out, matrix& scratch, size_t n) {
  const double n_gemm = 2.0 * double(n) * n * n;
  double flops = 0;
  out = t;
  int have = 1;
  for (; have * 2 <= p; have *= 2, flops += n_gemm / 2) {
    square(out, scratch, n);
    std::swap(out, scratch);
  }
  for (; have < p; ++have, flops += n_gemm) {
    gemm(out, t, scratch, n);
    std::swap(out, scratch);
  }
  return flops;
}

// ||m - I||_F, which bounds the spectral distance from above.
double distance_from_identity(const matrix& m, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      const double d = double(m[i * n + j]) - (i == j ? 1.0 : 0.0);
      sum += d * d;
    }
  return std::sqrt(sum);
}

// The coupled Newton iteration's state (Guo & Higham 2006): X -> A^{-1/p} while M = X^p A -> I,
// from X0 = c^{-1/p} I and M0 = A / c. A step T = gain (I - M / pole) (kernels/cpu/spectrum)
// makes X <- X T and M <- T^p M.
struct coupled_newton_state {
  size_t n;
  int p;
  matrix x, m, step, power, scratch;

  coupled_newton_state(const matrix& a, size_t size, int root, double c)
      : n(size),
        p(root),
        x(scaled_identity(n, static_cast<float>(std::pow(c, -1.0 / p)))),
        m(shifted(a, n, 0.0f, static_cast<float>(1.0 / c))),
        step(n * n),
        power(n * n),
        scratch(n * n) {}

  // One step; with x_only, M is left as it was. Returns the FLOPs.
  double advance(const polynomial_step& t, bool x_only) {
    const double n_gemm = 2.0 * double(n) * n * n;
    shift(m, n, static_cast<float>(t.gain), static_cast<float>(-t.gain / t.pole), step);
    gemm(x, step, scratch, n);
    std::swap(x, scratch);
    if (x_only) return n_gemm;
    const double flops = n_gemm + raise_to(step, p, power, scratch, n) + n_gemm;
    gemm(power, m, scratch, n);
    std::swap(m, scratch);
    symmetrise(m, n);
    return flops;
  }
};

// X = A^{-1/p} by coupled Newton, the eigenvalues of A / c in [lo, hi] within (0, 1]. Once
// ||M - I||_F <= sqrt(tolerance), one classic step of X alone brings it to about tolerance.
root_outcome coupled_newton(const matrix& a, size_t n, int p, double c, spectrum_interval interval,
                            const root_options& o, std::span<float> out) {
  coupled_newton_state state(a, n, p, c);
  root_outcome outcome;
  double previous = distance_from_identity(state.m, n);
  while (outcome.iterations < o.max_iterations && previous > o.tolerance) {
    const bool last = previous * previous <= o.tolerance;
    const polynomial_step t = last ? choose_step(1.0, 1.0, p)  // classic Newton
                                   : choose_step(interval.lo, interval.hi, p);
    outcome.gemm_flops += state.advance(t, last);
    ++outcome.iterations;
    if (last) {
      previous = previous * previous * (p + 1) / (2.0 * p);  // Newton's quadratic bound
      break;
    }
    interval = {t.next_lo, 1.0};
    const double now = distance_from_identity(state.m, n);
    if (now >= previous && now < 1e-2) {  // fp32 has no more to give
      previous = now;
      break;
    }
    previous = now;
  }
  outcome.residual = previous;
  std::copy(state.x.begin(), state.x.end(), out.begin());
  return outcome;
}

// Coupled Newton-Schulz for a = y0 (z0 = I) with eigenvalues in [lo, hi] within (0, 1]:
// y -> a^{1/2}, z -> a^{-1/2}. Per step T = gain (I - z y / pole), y <- y T, z <- T z (the
// classic step is T = (3 I - z y) / 2). Once ||z y - I||_F <= sqrt(tolerance), the last step
// updates only the one that is wanted.
enum class wanted { root, inverse_root };
root_outcome schulz(matrix& y, matrix& z, size_t n, spectrum_interval interval, wanted keep,
                    const root_options& o) {
  matrix zy(n * n), t(n * n), scratch(n * n);
  root_outcome outcome;
  const double n_gemm = 2.0 * double(n) * n * n;
  double previous = 1e300;
  while (outcome.iterations < o.max_iterations) {
    gemm(z, y, zy, n);
    symmetrise(zy, n);
    outcome.gemm_flops += n_gemm;
    const double now = distance_from_identity(zy, n);
    if (now < o.tolerance || (now >= previous && now < 1e-2)) {
      previous = now;
      break;
    }
    const bool last = now * now <= o.tolerance;
    const polynomial_step step =
        last ? choose_step(1.0, 1.0, 2) : choose_step(interval.lo, interval.hi, 2);
    shift(zy, n, static_cast<float>(step.gain), static_cast<float>(-step.gain / step.pole), t);
    ++outcome.iterations;
    if (!last || keep == wanted::root) {
      gemm(y, t, scratch, n);
      std::swap(y, scratch);
      outcome.gemm_flops += n_gemm;
    }
    if (!last || keep == wanted::inverse_root) {
      gemm(t, z, scratch, n);
      std::swap(z, scratch);
      outcome.gemm_flops += n_gemm;
    }
    if (last) {
      previous = now * now * 3.0 / 4.0;  // the classic step's quadratic bound
      break;
    }
    interval = {step.next_lo, 1.0};
    previous = now;
  }
  outcome.residual = previous;
  return outcome;
}

// A^{-1/4} = c^{-1/4} (A / c)^{-1/4}, A / c with eigenvalues in [lo, hi]: the first stage
// gives (A / c)^{-1/2}, with eigenvalues in [hi^{-1/2}, lo^{-1/2}]; the second the square root
// of that, scaled into (0, 1] by s, an upper bound of its largest eigenvalue:
// (A / c)^{-1/4} = s^{1/2} ((A / c)^{-1/2} / s)^{1/2}. Taking the root of the inverse (not
// the inverse of the root) keeps fp32 accurate along the smallest eigenvalues, which dominate
// A^{-1/4}.
root_outcome newton_db(const matrix& a, size_t n, double c, spectrum_interval interval,
                       const root_options& o, std::span<float> out) {
  matrix y = shifted(a, n, 0.0f, static_cast<float>(1.0 / c));
  matrix z = scaled_identity(n, 1.0f);
  const root_outcome first = schulz(y, z, n, interval, wanted::inverse_root, o);
  const double s = largest_eigenvalue(z, n) * 1.01;
  y = shifted(z, n, 0.0f, static_cast<float>(1.0 / s));
  z = scaled_identity(n, 1.0f);
  const spectrum_interval second_interval{std::min(1.0, 1.0 / (std::sqrt(interval.hi) * s)), 1.0};
  const root_outcome second = schulz(y, z, n, second_interval, wanted::root, o);
  const auto scale = static_cast<float>(std::sqrt(s) * std::pow(c, -0.25));
  for (size_t r = 0; r < n; ++r)  // symmetric by construction; average out the rounding
    for (size_t col = 0; col < n; ++col)
      out[r * n + col] = scale * 0.5f * (y[r * n + col] + y[col * n + r]);
  return root_outcome{first.iterations + second.iterations, second.residual,
                      first.gemm_flops + second.gemm_flops};
}

// Coefficients of the degree-d Chebyshev series of x^{-1/p} on [lo, 1] (from d + 1 nodes, in
// double).
std::vector<double> chebyshev_coefficients(int d, int p, double lo) {
  constexpr double pi = 3.14159265358979323846;
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
  return coefficients;
}

// B^{-1/p} for B with eigenvalues in [lo, 1], by the series evaluated with Clenshaw's
// recurrence on T = (2 B - (1 + lo) I) / (1 - lo): b_k = 2 T b_{k+1} - b_{k+2} + c_k I, and
// the result T b_1 - b_2 + c_0 I. One GEMM per degree.
matrix chebyshev_series(const matrix& b, size_t n, int p, double lo, int degree) {
  const auto coefficients = chebyshev_coefficients(degree, p, lo);
  const matrix t = shifted(b, n, static_cast<float>(-(1.0 + lo) / (1.0 - lo)),
                           static_cast<float>(2.0 / (1.0 - lo)));
  matrix next(n * n, 0.0f), after(n * n, 0.0f), current(n * n);  // b_{k+1}, b_{k+2}, b_k
  for (int k = degree; k >= 1; --k) {
    shift(after, n, static_cast<float>(coefficients[k]), -1.0f, current);
    gemm(t, next, current, n, 2.0f, 1.0f);
    std::swap(after, next);
    std::swap(next, current);
  }
  shift(after, n, static_cast<float>(coefficients[0]), -1.0f, current);
  gemm(t, next, current, n, 1.0f, 1.0f);
  return current;
}

// A polynomial needs a degree near log(1 / accuracy) / (2 sqrt(lo)) for x^{-1/p} on [lo, 1]:
// thousands at lo = 1e-6. So coupled-Newton steps, with poles for the sure interval [damping,
// hi] (no estimate: a Chebyshev series is wild below its interval), first lift its lower end
// to 0.1; then A^{-1/p} = X M^{-1/p}, M^{-1/p} by the series on [lo, 1] (error below 1e-5 at
// the default degree 16).
result<root_outcome> chebyshev(const matrix& a, size_t n, int p, double c, spectrum_interval sure,
                               const root_options& o, std::span<float> out) {
  constexpr double enough = 0.1;
  coupled_newton_state state(a, n, p, c);
  root_outcome outcome;
  while (sure.lo < enough && outcome.iterations < o.max_iterations) {
    const polynomial_step t = choose_step(sure.lo, sure.hi, p);
    outcome.gemm_flops += state.advance(t, false);
    ++outcome.iterations;
    sure = {t.next_lo, 1.0};
  }
  if (sure.lo < enough)
    return failure(errc::non_finite, "chebyshev: the spectrum was not lifted into [0.1, 1]");
  const double lo = std::min(sure.lo, 0.99);
  const matrix series = chebyshev_series(state.m, n, p, lo, o.degree);
  gemm(state.x, series, state.scratch, n);
  outcome.gemm_flops += (o.degree + 1) * 2.0 * double(n) * n * n;
  outcome.iterations += o.degree;
  outcome.residual = distance_from_identity(state.m, n);
  std::copy(state.scratch.begin(), state.scratch.end(), out.begin());
  return outcome;
}

double frobenius(const matrix& a) {
  double sum = 0;
  for (float x : a) sum += double(x) * double(x);
  return std::sqrt(sum);
}

// How a matrix is scaled, and where the eigenvalues of (A + damping I) / c lie. The damping
// is a sure lower bound; Lanczos's smallest Ritz value, halved, a likelier one (eigenvalues
// below it still converge, at the classic rate, so a poor estimate costs steps, never
// accuracy). The largest eigenvalue is estimated twice (power iteration and Lanczos, both
// from below, so the larger, plus 1%); the Frobenius norm bounds it for sure.
struct root_scale {
  double c = 1;       // the scale: an upper bound of the damped matrix's largest eigenvalue
  float damping = 0;  // added to the diagonal
  spectrum_interval interval;
};

root_scale scale_of(const matrix& a, size_t n, const root_options& o) {
  const ritz_extremes ritz = lanczos_extremes(a, n);
  double lambda = o.scaling == root_scaling::frobenius
                      ? frobenius(a)
                      : 1.01 * std::max(largest_eigenvalue(a, n), ritz.largest);
  if (!(lambda > 0)) lambda = 1.0;  // a zero matrix: the damping alone is left
  root_scale s;
  s.damping = static_cast<float>(o.epsilon * lambda);
  s.c = lambda + s.damping;
  const double hi = std::min(1.0, 1.01 * (ritz.largest + s.damping) / s.c);
  const double lo = std::max(double(s.damping), 0.5 * (ritz.smallest + s.damping)) / s.c;
  s.interval = hi > 0 ? spectrum_interval{std::min(lo, hi), hi} : spectrum_interval{lo, 1.0};
  return s;
}

// A Newton solver whose M did not reach I (a scale far off, fp32 exhausted early) gives a root
// that must not be used.
result<root_outcome> converged(root_outcome outcome) {
  if (outcome.residual <= 1e-2) return outcome;
  return failure(errc::non_finite, "the inverse root did not converge (residual " +
                                       std::to_string(outcome.residual) + ")");
}

}  // namespace

result<root_outcome> inverse_root(std::span<const float> a, size_t n, int p, std::span<float> out,
                                  const root_options& o) {
  if (n == 0 || a.size() != n * n || out.size() != n * n || p < 1)
    return failure(errc::shape_mismatch, "inverse_root: an n x n matrix and p >= 1");
  for (float x : a)
    if (!std::isfinite(x)) return failure(errc::non_finite, "inverse_root: non-finite input");
  if (o.solver == root_solver::chebyshev && o.degree < 1)
    return failure(errc::bad_configuration, "the chebyshev degree must be at least 1");
  if (o.solver == root_solver::newton_db && p != 4)
    return failure(errc::bad_configuration, "newton_db computes inverse 4th roots only");
  if (o.solver == root_solver::chebyshev && !(o.epsilon > 0))
    return failure(errc::bad_configuration, "chebyshev needs a damping epsilon above 0");
  matrix damped(a.begin(), a.end());
  const root_scale scale = scale_of(damped, n, o);
  for (size_t i = 0; i < n; ++i) damped[i * n + i] += scale.damping;
  switch (o.solver) {
    case root_solver::evd:
      if (auto done = evd_root(damped, n, p, out); !done.ok()) return done;
      return root_outcome{};
    case root_solver::coupled_newton:
      return converged(coupled_newton(damped, n, p, scale.c, scale.interval, o, out));
    case root_solver::newton_db:
      return converged(newton_db(damped, n, scale.c, scale.interval, o, out));
    case root_solver::chebyshev:  // the damping bounds the spectrum from below
      return chebyshev(damped, n, p, scale.c, {scale.damping / scale.c, 1.0}, o, out);
  }
  return failure(errc::bad_configuration, "unknown solver");
}

}  // namespace troupe::kernels
