// troupe-bench dash: one DASH step on an N x N parameter (default 1024, B = 256; eight
// gradients in turn) for each inverse-root solver, with the roots every step (f = 1) and every
// 10 steps (f = 10), beside an Adam step on the same tensors; once with one step thread and
// BLAS on all cores, once ("xT") with T step threads over the blocks and one BLAS thread each;
// then B / 2 and 2 B at f = 10. The limit of a DASH step is the time its matrix-multiply FLOPs
// take at the rate of one large OpenBLAS sgemm measured in the same run (f = 10 steps are
// timed ten at a time, so that the roots' share is averaged in). Last, each iterative solver's
// relative error against the eigendecomposition on statistics that one step and twenty steps
// built.
#include <cblas.h>
#include <fmt/format.h>

#include <cmath>
#include <thread>

#include "apps/bench/suites.hpp"
#include "kernels/cpu/dash.hpp"
#include "kernels/cpu/optimizers.hpp"

namespace troupe::bench {

namespace {

using namespace troupe::kernels;

// FLOP/s of one 2048^3 sgemm: the machine's matrix-multiply limit.
double sgemm_rate(int reps) {
  const int n = 2048;
  const auto a = random_values(size_t{n} * n, 1), b = random_values(size_t{n} * n, 2);
  std::vector<float> c(size_t{n} * n);
  const timing t = measure(1, reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  });
  return 2.0 * n * n * double(n) / t.median_s;
}

// A parameter stepped with one of eight gradients in turn: statistics that keep changing, as
// in training (one gradient repeated would leave them nearly singular for ever).
struct dash_run {
  std::vector<float> theta, m, v;
  std::vector<std::vector<float>> grads;
  dash_matrix d;
  uint64_t step = 0;

  dash_run(uint32_t n, const dash_config& config)
      : theta(random_values(size_t{n} * n, 3)), m(theta.size()), v(theta.size()), d(n, n, config) {
    for (uint64_t i = 0; i < 8; ++i) grads.push_back(random_values(theta.size(), 4 + i, 1e-2f));
  }
  void steps(int count) {
    for (int i = 0; i < count; ++i, ++step) d.step(theta, grads[step % 8], m, v, step + 1, 1e-3f);
  }
};

// threads 1: one step thread, BLAS with all cores; more: that many step threads over the
// blocks, BLAS with one thread per call.
row time_dash(uint32_t n, uint32_t block, uint32_t frequency, root_solver solver, uint32_t threads,
              int reps, double rate) {
  dash_config config;
  config.block = block;
  config.frequency = frequency;
  config.roots.solver = solver;
  config.threads = threads;
  const int blas_threads = openblas_get_num_threads();
  if (threads > 1) openblas_set_num_threads(1);
  dash_run run{n, config};
  const int per_rep = static_cast<int>(frequency);
  run.steps(per_rep);  // warm-up: statistics exist, roots computed once
  const double flops_before = run.d.gemm_flops();
  const uint64_t steps_before = run.step;
  const timing t = measure(0, reps, [&] { run.steps(per_rep); });
  const double flops_per_step =
      (run.d.gemm_flops() - flops_before) / double(run.step - steps_before);
  openblas_set_num_threads(blas_threads);
  row r{fmt::format("dash {} B={} f={}{}", to_string(solver), block, frequency,
                    threads > 1 ? fmt::format(" x{}", threads) : ""),
        "ms/step"};
  r.ours = 1e3 * t.median_s / per_rep;
  r.ours_min = 1e3 * t.min_s / per_rep;
  r.ours_max = 1e3 * t.max_s / per_rep;
  r.limit = solver == root_solver::evd ? 0.0 : 1e3 * flops_per_step / rate;
  r.limit_name = solver == root_solver::evd ? "(not GEMMs)" : "its GEMM FLOPs at sgemm rate";
  return r;
}

row time_adam(uint32_t n, int reps) {
  auto theta = random_values(size_t{n} * n, 3), grad = random_values(size_t{n} * n, 4);
  std::vector<float> m(theta.size()), v(theta.size());
  uint64_t step = 0;
  const timing t = measure(1, reps, [&] {
    adam_step(theta, m, v, grad, {1e-3f, 0.9f, 0.999f, 1e-8f, 0, ++step});
  });
  return row{"adam (same tensor)", "ms/step", 1e3 * t.median_s, 1e3 * t.min_s, 1e3 * t.max_s};
}

// Each iterative solver on a statistics block that `steps` DASH steps built, against evd: one
// step leaves it of rank B / 2 or so (the damping sets its condition), twenty well conditioned.
std::vector<row> solver_errors(uint32_t block, int steps) {
  dash_config config;
  config.block = block;
  config.frequency = 1000;
  dash_run run{block, config};
  run.steps(steps);
  const auto left = run.d.left_of(0, 0);
  std::vector<float> reference(left.size()), out(left.size());
  root_options o;
  o.solver = root_solver::evd;
  inverse_root(left, block, 4, reference, o);
  std::vector<row> rows;
  for (root_solver s :
       {root_solver::coupled_newton, root_solver::newton_db, root_solver::chebyshev}) {
    o.solver = s;
    const auto done = inverse_root(left, block, 4, out, o);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      diff += (double(out[i]) - reference[i]) * (double(out[i]) - reference[i]);
      norm += double(reference[i]) * reference[i];
    }
    const double error = std::sqrt(diff / norm);
    rows.push_back(row{fmt::format("{} error vs evd, {} step{} ({} it)", to_string(s), steps,
                                   steps == 1 ? "" : "s", done ? done->iterations : -1),
                       "rel. error", error, error, error});
  }
  return rows;
}

}  // namespace

suite_result run_dash(const options& o) {
  const auto n = static_cast<uint32_t>(o.size ? o.size : 1024);
  const uint32_t block = 256;
  const int reps = std::max(1, std::min(o.reps, 3));  // f = 1 steps take seconds here
  const double rate = sgemm_rate(reps);
  suite_result result{"dash", {}};
  result.rows.push_back(time_adam(n, o.reps));
  const auto cores = std::max(1u, std::thread::hardware_concurrency());
  const auto solvers = {root_solver::evd, root_solver::coupled_newton, root_solver::newton_db,
                        root_solver::chebyshev};
  const std::vector<uint32_t> thread_counts =
      cores > 1 ? std::vector<uint32_t>{1u, cores} : std::vector<uint32_t>{1u};
  for (uint32_t threads : thread_counts)
    for (uint32_t f : {1u, 10u})
      for (root_solver s : solvers)
        result.rows.push_back(time_dash(n, block, f, s, threads, reps, rate));
  for (uint32_t other : {block / 2, block * 2})  // other block sizes, f = 10, block threads
    for (root_solver s : {root_solver::evd, root_solver::coupled_newton})
      if (other >= 1 && other <= n)
        result.rows.push_back(time_dash(n, other, 10, s, cores, reps, rate));
  for (int steps : {1, 20})
    for (auto& r : solver_errors(block, steps)) result.rows.push_back(r);
  result.rows.push_back(
      row{"sgemm 2048^3 (the limit's rate)", "GFLOP/s", rate / 1e9, rate / 1e9, rate / 1e9});
  return result;
}

}  // namespace troupe::bench
