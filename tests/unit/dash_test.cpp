// Unit tests of the CPU DASH step (kernels/cpu/dash): the blocks and their groups, one step
// against the formula computed by hand, blocks that do not influence each other, a block with
// a NaN gradient reset and counted while the others go on, 16-bit statistics close to fp32,
// a least-squares problem that DASH solves, block threads that change nothing, and the packed
// layout that a GPU step reads.
#define BOOST_TEST_MODULE dash
#include <boost/test/unit_test.hpp>

#include <cblas.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/dash.hpp"
#include "kernels/cpu/dash_pack.hpp"
#include "kernels/cpu/half.hpp"

using namespace troupe::kernels;

namespace {

std::vector<float> random_values(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (auto& x : out) x = normal(rng);
  return out;
}

dash_config config_with(uint32_t block, uint32_t frequency, root_solver solver) {
  dash_config c;
  c.block = block;
  c.frequency = frequency;
  c.roots.solver = solver;
  c.adam.lr = 0.01f;
  return c;
}

// A dash_matrix with its own Adam moments, stepping at the configured learning rate.
struct trainer : dash_matrix {
  std::vector<float> m, v;
  trainer(uint32_t rows, uint32_t cols, dash_config config)
      : dash_matrix(rows, cols, config), m(size_t{rows} * cols), v(size_t{rows} * cols) {}
  uint32_t step(std::vector<float>& theta, const std::vector<float>& g, uint64_t t) {
    return dash_matrix::step(theta, g, m, v, t, config().adam.lr);
  }
};

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_CASE(blocks_of_one_shape_are_stacked_in_one_group) {
  const trainer d{5, 7, config_with(3, 1, root_solver::evd)};
  BOOST_TEST(d.blocks() == 6u);  // rows 3 + 2, columns 3 + 3 + 1
  BOOST_TEST_REQUIRE(d.groups().size() == 4u);
  size_t full = 0;
  for (const auto& g : d.groups())
    if (g.rows == 3 && g.cols == 3) full = g.size();
  BOOST_TEST(full == 2u);
}

BOOST_AUTO_TEST_CASE(one_step_follows_the_formula) {
  const uint32_t r = 4, c = 3;
  auto config = config_with(8, 1, root_solver::evd);
  trainer d{r, c, config};
  auto theta = random_values(r * c, 1);
  const auto before = theta;
  const auto g = random_values(r * c, 2);
  BOOST_TEST_REQUIRE(d.step(theta, g, 1) == 0u);
  // By hand: L = (1 - beta) g g^T, R = (1 - beta) g^T g, m-hat = g, Adam's step g / (|g| + eps).
  const float w = 1.0f - config.beta;
  std::vector<float> left(r * r), right(c * c), lroot(r * r), rroot(c * c);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, r, c, w, g.data(), c, g.data(), c, 0.0f,
              left.data(), r);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c, c, r, w, g.data(), c, g.data(), c, 0.0f,
              right.data(), c);
  BOOST_TEST(max_difference(d.left_of(0, 0), left) < 1e-6);
  BOOST_TEST(max_difference(d.right_of(0, 0), right) < 1e-6);
  BOOST_TEST_REQUIRE(static_cast<bool>(inverse_root(left, r, 4, lroot, config.roots)));
  BOOST_TEST_REQUIRE(static_cast<bool>(inverse_root(right, c, 4, rroot, config.roots)));
  std::vector<float> tmp(r * c), direction(r * c);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, r, 1.0f, lroot.data(), r, g.data(),
              c, 0.0f, tmp.data(), c);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, c, 1.0f, tmp.data(), c, rroot.data(),
              c, 0.0f, direction.data(), c);
  double adam = 0, shampoo = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double step = g[i] / (std::abs(g[i]) + config.adam.epsilon);
    adam += step * step;
    shampoo += double(direction[i]) * direction[i];
  }
  const double graft = std::sqrt(adam / shampoo);
  for (size_t i = 0; i < theta.size(); ++i)
    BOOST_TEST(std::abs(theta[i] - (before[i] - config.adam.lr * graft * direction[i])) < 1e-6);
}

BOOST_AUTO_TEST_CASE(blocks_do_not_influence_each_other) {
  const uint32_t r = 6, c = 5, b = 3;
  trainer whole{r, c, config_with(b, 2, root_solver::coupled_newton)};
  auto theta = random_values(r * c, 3);
  auto copy = theta;
  for (uint64_t t = 1; t <= 4; ++t) whole.step(theta, random_values(r * c, 10 + t), t);
  // The top-left 3 x 3 block on its own gives the same values.
  trainer alone{b, b, config_with(b, 2, root_solver::coupled_newton)};
  std::vector<float> block(b * b);
  auto cut = [&](const std::vector<float>& m) {
    std::vector<float> out(b * b);
    for (uint32_t i = 0; i < b; ++i)
      for (uint32_t j = 0; j < b; ++j) out[i * b + j] = m[i * c + j];
    return out;
  };
  block = cut(copy);
  for (uint64_t t = 1; t <= 4; ++t) alone.step(block, cut(random_values(r * c, 10 + t)), t);
  BOOST_TEST(max_difference(block, cut(theta)) < 1e-6);
}

BOOST_AUTO_TEST_CASE(a_block_with_a_nan_gradient_is_reset_and_the_others_go_on) {
  const uint32_t r = 4, c = 4;
  trainer d{r, c, config_with(2, 1, root_solver::coupled_newton)};
  auto theta = random_values(r * c, 4);
  BOOST_TEST(d.step(theta, random_values(r * c, 5), 1) == 0u);
  const auto before = theta;
  auto g = random_values(r * c, 6);
  g[0] = NAN;  // in the top-left block
  BOOST_TEST(d.step(theta, g, 2) == 1u);
  BOOST_TEST(d.resets() == 1u);
  for (uint32_t i = 0; i < 2; ++i)
    for (uint32_t j = 0; j < 2; ++j) BOOST_TEST(theta[i * c + j] == before[i * c + j]);
  BOOST_TEST(theta[2 * c + 2] != before[2 * c + 2]);  // another block moved
  for (float x : theta) BOOST_TEST(std::isfinite(x));
  for (float x : d.left_of(0, 0)) BOOST_TEST(x == 0.0f);
  BOOST_TEST(d.step(theta, random_values(r * c, 7), 3) == 0u);  // and it trains again
}

BOOST_AUTO_TEST_CASE(sixteen_bit_statistics_stay_close_to_fp32) {
  const uint32_t r = 16, c = 12;
  for (dash_storage storage : {dash_storage::bf16, dash_storage::fp16}) {
    auto narrow_config = config_with(8, 2, root_solver::coupled_newton);
    narrow_config.storage = storage;
    // The 16-bit run damps by at least its format's resolution: the fp32 run does the same.
    auto wide_config = config_with(8, 2, root_solver::coupled_newton);
    wide_config.roots.epsilon = storage == dash_storage::bf16 ? 1.0f / 128 : 1.0f / 1024;
    trainer wide{r, c, wide_config};
    trainer narrow{r, c, narrow_config};
    auto a = random_values(r * c, 8), b = a;
    for (uint64_t t = 1; t <= 6; ++t) {
      const auto g = random_values(r * c, 20 + t, 1e-3f);  // small: fp16 needs the rescaling
      wide.step(a, g, t);
      narrow.step(b, g, t);
    }
    BOOST_TEST(max_difference(a, b) < 2e-3);
    const auto exact = wide.left_of(0, 0), stored = narrow.left_of(0, 0);
    double largest = 0;
    for (float x : exact) largest = std::max(largest, double(std::abs(x)));
    BOOST_TEST(max_difference(exact, stored) <= 1e-2 * largest);
  }
}

BOOST_AUTO_TEST_CASE(stochastic_rounding_is_unbiased) {
  // 1 + 2^-10 lies between bf16 neighbours 1 and 1 + 2^-7: nearest rounding always gives 1
  // (a bias of 1e-3, more than one DASH step adds to its statistics); stochastic rounding
  // gives 1 + 2^-7 one time in eight and so averages to the value. Likewise for fp16.
  for (bool bf16 : {true, false}) {
    const float x = bf16 ? 1.0f + std::ldexp(1.0f, -10) : 1.0f - std::ldexp(1.0f, -13);
    const float nearest = bf16 ? bf16_to_float(float_to_bf16(x)) : half_to_float(float_to_half(x));
    BOOST_TEST(nearest != x);
    std::mt19937_64 rng(9);
    double sum = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i)
      sum += bf16 ? bf16_to_float(float_to_bf16_stochastic(x, rng()))
                  : half_to_float(float_to_half_stochastic(x, rng()));
    BOOST_TEST(std::abs(sum / n - x) < 0.1 * std::abs(nearest - x), (bf16 ? "bf16 " : "fp16 ")
                                                                        << sum / n << " vs " << x);
  }
}

BOOST_AUTO_TEST_CASE(dash_solves_a_least_squares_problem) {
  // min over the 8 x 6 matrix X of |A X - B|^2 / 2, A 10 x 8: gradient A^T (A X - B).
  const uint32_t n = 10, r = 8, c = 6;
  const auto a = random_values(n * r, 30), target = random_values(r * c, 31);
  std::vector<float> b(n * c);  // B = A X*: the optimum is 0
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, r, 1.0f, a.data(), r, target.data(),
              c, 0.0f, b.data(), c);
  auto loss_and_grad = [&](const std::vector<float>& x, std::vector<float>& grad) {
    std::vector<float> residual = b;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, r, 1.0f, a.data(), r, x.data(), c,
                -1.0f, residual.data(), c);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, c, n, 1.0f, a.data(), r,
                residual.data(), c, 0.0f, grad.data(), c);
    double loss = 0;
    for (float e : residual) loss += 0.5 * double(e) * e;
    return loss;
  };
  auto config = config_with(4, 5, root_solver::coupled_newton);
  config.beta = 0.95f;
  config.adam.lr = 0.02f;
  trainer d{r, c, config};
  std::vector<float> x(r * c, 0.0f), grad(r * c);
  const double first = loss_and_grad(x, grad);
  double last = first;
  for (uint64_t t = 1; t <= 400; ++t) {
    d.step(x, grad, t);
    last = loss_and_grad(x, grad);
  }
  BOOST_TEST(last < 0.01 * first, "loss " << first << " -> " << last);
  BOOST_TEST(d.resets() == 0u);
}

BOOST_AUTO_TEST_CASE(the_saved_state_restores_the_same_steps) {
  const uint32_t r = 7, c = 5;
  auto config = config_with(4, 3, root_solver::coupled_newton);
  config.storage = dash_storage::bf16;
  trainer first{r, c, config};
  auto theta = random_values(r * c, 40);
  for (uint64_t t = 1; t <= 4; ++t) first.step(theta, random_values(r * c, 41 + t), t);
  trainer second{r, c, config};
  second.m = first.m;
  second.v = first.v;
  for (size_t i = 0; i < first.state_count(); ++i) {
    const auto saved = first.state(i);
    BOOST_TEST(saved.size() % first.block_values(i) == 0u);
    BOOST_TEST_REQUIRE(second.set_state(i, 0, saved).ok());
  }
  auto other = theta;
  for (uint64_t t = 5; t <= 7; ++t) {  // step 7 computes the roots again
    const auto g = random_values(r * c, 41 + t);
    first.step(theta, g, t);
    second.step(other, g, t);
  }
  BOOST_TEST(max_difference(theta, other) == 0.0);
  const std::vector<float> too_many(first.block_values(0) * 10, 1.0f);
  BOOST_TEST(!second.set_state(0, 0, too_many).ok());
  BOOST_TEST(!second.set_state(99, 0, {}).ok());
}

BOOST_AUTO_TEST_CASE(block_threads_take_the_same_steps_as_one) {
  // 70 x 50 with B = 16: full blocks and remainder blocks, in four groups; one block's
  // gradient is NaN at step 3, so the resets are collected from threads too.
  auto config = config_with(16, 2, root_solver::coupled_newton);
  config.storage = dash_storage::bf16;  // stochastic rounding seeded per block, not per thread
  trainer one{70, 50, config};
  config.threads = 3;
  trainer three{70, 50, config};
  auto theta_one = random_values(70 * 50, 1), theta_three = theta_one;
  for (uint64_t t = 1; t <= 5; ++t) {
    auto g = random_values(70 * 50, 10 + static_cast<unsigned>(t), 0.1f);
    if (t == 3) g[20 * 50 + 40] = NAN;  // the block of rows 16-31, columns 32-47
    BOOST_TEST(one.step(theta_one, g, t) == (t == 3 ? 1u : 0u));
    BOOST_TEST(three.step(theta_three, g, t) == (t == 3 ? 1u : 0u));
  }
  BOOST_TEST(max_difference(theta_one, theta_three) == 0.0);
  BOOST_TEST(one.resets() == three.resets());
  BOOST_TEST(one.gemm_flops() == three.gemm_flops());
  for (size_t i = 0; i < one.state_count(); ++i)
    BOOST_TEST(max_difference(one.state(i), three.state(i)) == 0.0, "state " << i);
}

// A packed step (kernels/cpu/dash_pack) stacks each block's moments row by row, as the CUDA
// step reads them, and its statistics and roots in the order of state(); unpacking a package
// whose values were changed writes each value back to where it came from.
BOOST_AUTO_TEST_CASE(a_packed_step_stacks_blocks_where_the_gpu_reads_them) {
  const uint32_t rows = 5, cols = 7;
  dash_matrix dash{rows, cols, config_with(4, 3, root_solver::coupled_newton)};
  std::vector<float> theta(rows * cols), grad(rows * cols), m(rows * cols), v(rows * cols);
  for (size_t i = 0; i < m.size(); ++i) {
    theta[i] = float(i);
    grad[i] = -float(i);
    m[i] = 1000.0f + float(i);
    v[i] = 2000.0f + float(i);
  }
  const auto package = pack_dash_step(dash, theta, grad, m, v, 4, 0.5f);
  BOOST_TEST(package.hyper.compute_roots);  // steps 1, 4, 7, ... with frequency 3
  BOOST_TEST(package.hyper.lr == 0.5f);
  BOOST_TEST(package.hyper.beta == dash.config().beta);
  BOOST_TEST(package.hyper.damping == dash.config().roots.epsilon);
  BOOST_TEST(package.values->size() == packed_floats(dash));
  const auto& values = *package.values;
  for (size_t gi = 0; gi < dash.groups().size(); ++gi) {
    const auto& g = dash.groups()[gi];
    const auto& p = package.groups[gi];
    BOOST_TEST(p.left % 64 == 0u);
    for (size_t k = 0; k < g.size(); ++k)
      for (uint32_t r = 0; r < g.rows; ++r)
        for (uint32_t c = 0; c < g.cols; ++c) {
          const size_t stacked = (k * g.rows + r) * g.cols + c;
          const size_t at = size_t{g.row0[k] + r} * cols + g.col0[k] + c;
          BOOST_TEST(values[p.m + stacked] == m[at]);
          BOOST_TEST(values[p.v + stacked] == v[at]);
        }
    const size_t at[4] = {p.left, p.right, p.left_root, p.right_root};
    for (size_t s = 0; s < 4; ++s) {  // L, R, and their roots (the identity before any)
      const auto state = dash.state(gi * 4 + s);
      for (size_t i = 0; i < state.size(); ++i) BOOST_TEST(values[at[s] + i] == state[i]);
    }
  }
  // A "device" that adds 1 to every moment and to theta: each lands where it came from.
  auto stepped = package;
  stepped.values = std::make_shared<std::vector<float>>(values);
  for (size_t i = 0; i < theta.size(); ++i) (*stepped.values)[package.theta + i] += 1.0f;
  for (const auto& p : package.groups)
    for (size_t i = 0; i < size_t{p.count} * p.rows * p.cols; ++i) {
      (*stepped.values)[p.m + i] += 1.0f;
      (*stepped.values)[p.v + i] += 1.0f;
    }
  (*stepped.values)[package.groups[0].resets] = 0.0f;
  const auto theta_before = theta, m_before = m, v_before = v;
  auto resets = unpack_dash_step(stepped, dash, theta, m, v);
  BOOST_TEST_REQUIRE(static_cast<bool>(resets));
  BOOST_TEST(*resets == 0u);
  for (size_t i = 0; i < theta.size(); ++i) {
    BOOST_TEST(theta[i] == theta_before[i] + 1.0f);
    BOOST_TEST(m[i] == m_before[i] + 1.0f);
    BOOST_TEST(v[i] == v_before[i] + 1.0f);
  }
  // A package for another shape is refused.
  dash_matrix other{rows + 1, cols, config_with(4, 3, root_solver::coupled_newton)};
  std::vector<float> bigger((rows + 1) * cols);
  BOOST_TEST(!unpack_dash_step(stepped, other, bigger, bigger, bigger));
}
