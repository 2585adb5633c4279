#include "kernels/cpu/dash.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <system_error>
#include <thread>

#include "kernels/cpu/half.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "kernels/status.hpp"
#include "troupe/random.hpp"

namespace troupe::kernels {

namespace {

void set_identity(float* out, size_t n) {
  std::fill(out, out + n * n, 0.0f);
  for (size_t i = 0; i < n; ++i) out[i * n + i] = 1.0f;
}

double norm_of(const std::vector<float>& xs) {
  double sum = 0;
  for (float x : xs) sum += double(x) * double(x);
  return std::sqrt(sum);
}

// The block edges along one dimension: full blocks of `block`, then the remainder.
std::vector<std::pair<uint32_t, uint32_t>> spans_of(uint32_t length, uint32_t block) {
  std::vector<std::pair<uint32_t, uint32_t>> out;  // (start, size)
  for (uint32_t at = 0; at < length; at += block)
    out.emplace_back(at, std::min(block, length - at));
  return out;
}

}  // namespace

// Buffers one block step needs, sized for the largest block.
struct dash_matrix::scratch {
  std::vector<float> g, m, adam, left, right, product, direction;
};

dash_matrix::dash_matrix(uint32_t rows, uint32_t cols, dash_config config)
    : rows_(rows), cols_(cols), config_(config) {
  config_.block = std::max<uint32_t>(config_.block, 1);
  config_.frequency = std::max<uint32_t>(config_.frequency, 1);
  std::map<std::pair<uint32_t, uint32_t>, size_t> index;  // shape -> group
  for (auto [r0, r] : spans_of(rows, config_.block))
    for (auto [c0, c] : spans_of(cols, config_.block)) {
      auto [it, added] = index.emplace(std::pair{r, c}, groups_.size());
      if (added) groups_.push_back(dash_group{r, c});
      auto& g = groups_[it->second];
      g.row0.push_back(r0);
      g.col0.push_back(c0);
    }
  const bool narrow = config_.storage != dash_storage::fp32;
  for (auto& g : groups_) {
    const size_t n = g.size(), ll = size_t{g.rows} * g.rows, rr = size_t{g.cols} * g.cols;
    if (narrow) {
      g.left16.assign(n * ll, 0);
      g.right16.assign(n * rr, 0);
      g.left_scale.assign(n, 0.0f);
      g.right_scale.assign(n, 0.0f);
    } else {
      g.left.assign(n * ll, 0.0f);
      g.right.assign(n * rr, 0.0f);
    }
    g.left_root.assign(n * ll, 0.0f);
    g.right_root.assign(n * rr, 0.0f);
    for (size_t k = 0; k < n; ++k) {
      set_identity(g.left_root.data() + k * ll, g.rows);
      set_identity(g.right_root.data() + k * rr, g.cols);
    }
  }
}

size_t dash_matrix::blocks() const {
  size_t n = 0;
  for (const auto& g : groups_) n += g.size();
  return n;
}

void dash_matrix::load(const dash_group& g, size_t k, bool left, std::vector<float>& out) const {
  const size_t n = left ? size_t{g.rows} * g.rows : size_t{g.cols} * g.cols;
  out.resize(n);
  if (config_.storage == dash_storage::fp32) {
    const auto& from = left ? g.left : g.right;
    std::copy(from.begin() + k * n, from.begin() + (k + 1) * n, out.begin());
    return;
  }
  const auto& from = left ? g.left16 : g.right16;
  const float scale = (left ? g.left_scale : g.right_scale)[k];
  const bool bf16 = config_.storage == dash_storage::bf16;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t x = from[k * n + i];
    out[i] = scale * (bf16 ? bf16_to_float(x) : half_to_float(x));
  }
}

void dash_matrix::store(dash_group& g, size_t k, bool left, std::span<const float> values) {
  const size_t n = values.size();
  if (config_.storage == dash_storage::fp32) {
    std::copy(values.begin(), values.end(), (left ? g.left : g.right).begin() + k * n);
    return;
  }
  // Rescaled into [-1, 1] so that fp16 neither overflows nor loses small statistics, and
  // rounded stochastically: with beta near 1 each step adds less than one 16-bit step to L,
  // which rounding to nearest would drop every time; unbiased rounding keeps it on average.
  float largest = 0;
  for (float x : values) largest = std::max(largest, std::abs(x));
  const float scale = largest > 0 ? largest : 1.0f;
  (left ? g.left_scale : g.right_scale)[k] = scale;
  auto& to = left ? g.left16 : g.right16;
  const bool bf16 = config_.storage == dash_storage::bf16;
  uint64_t seed =
      splitmix64_finalize(rounding_step_ * splitmix64_gamma ^ (uint64_t(k) << 1 | left) ^
                          uint64_t(&g - groups_.data()) << 32);
  for (size_t i = 0; i < n; ++i) {
    const float x = values[i] / scale;
    seed = splitmix64_finalize(seed + i);
    to[k * n + i] = bf16 ? float_to_bf16_stochastic(x, seed) : float_to_half_stochastic(x, seed);
  }
}

std::vector<float> dash_matrix::left_of(size_t group, size_t k) const {
  std::vector<float> out;
  load(groups_[group], k, true, out);
  return out;
}

std::vector<float> dash_matrix::right_of(size_t group, size_t k) const {
  std::vector<float> out;
  load(groups_[group], k, false, out);
  return out;
}

void dash_matrix::reset_block(dash_group& g, size_t k, moments mv) {
  const size_t ll = size_t{g.rows} * g.rows, rr = size_t{g.cols} * g.cols;
  store(g, k, true, std::vector<float>(ll, 0.0f));
  store(g, k, false, std::vector<float>(rr, 0.0f));
  set_identity(g.left_root.data() + k * ll, g.rows);
  set_identity(g.right_root.data() + k * rr, g.cols);
  for (uint32_t i = 0; i < g.rows; ++i) {
    const size_t at = size_t{g.row0[k] + i} * cols_ + g.col0[k];
    std::fill(mv.m.begin() + at, mv.m.begin() + at + g.cols, 0.0f);
    std::fill(mv.v.begin() + at, mv.v.begin() + at + g.cols, 0.0f);
  }
  ++resets_;
}

bool dash_matrix::step_block(dash_group& g, size_t k, std::span<float> theta,
                             std::span<const float> grad, moments mv, uint64_t step, float lr,
                             scratch& s, double& flops) {
  const uint32_t r = g.rows, c = g.cols;
  const size_t rc = size_t{r} * c, ll = size_t{r} * r, rr = size_t{c} * c;
  const auto at = [&](uint32_t i) { return size_t{g.row0[k] + i} * cols_ + g.col0[k]; };
  s.g.resize(rc);
  for (uint32_t i = 0; i < r; ++i)
    std::copy(grad.begin() + at(i), grad.begin() + at(i) + c, s.g.begin() + size_t{i} * c);
  if (!all_finite(s.g)) return false;
  // Statistics, accumulated in fp32.
  const float beta = config_.beta;
  load(g, k, true, s.left);
  load(g, k, false, s.right);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, r, c, 1.0f - beta, s.g.data(), c,
              s.g.data(), c, beta, s.left.data(), r);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c, c, r, 1.0f - beta, s.g.data(), c,
              s.g.data(), c, beta, s.right.data(), c);
  if (!all_finite(s.left) || !all_finite(s.right)) return false;
  store(g, k, true, s.left);
  store(g, k, false, s.right);
  if ((step - 1) % config_.frequency == 0) {
    root_options roots = config_.roots;
    roots.epsilon = effective_damping(config_);
    auto lr = inverse_root(s.left, r, 4, {g.left_root.data() + k * ll, ll}, roots);
    auto rt = inverse_root(s.right, c, 4, {g.right_root.data() + k * rr, rr}, roots);
    if (!lr || !rt) return false;
    flops += lr->gemm_flops + rt->gemm_flops;
  }
  // Adam's moments and step on the block: the first moment is what gets preconditioned, and
  // Adam's step gives the norm (grafting).
  const auto& h = config_.adam;
  const auto inverse1 = static_cast<float>(1.0 / (1.0 - std::pow(double(h.beta1), double(step))));
  const auto inverse2 = static_cast<float>(1.0 / (1.0 - std::pow(double(h.beta2), double(step))));
  s.m.resize(rc);
  s.adam.resize(rc);
  for (uint32_t i = 0; i < r; ++i)
    for (uint32_t j = 0; j < c; ++j) {
      const size_t p = at(i) + j, q = size_t{i} * c + j;
      const float x = s.g[q];
      float& m = mv.m[p];
      float& v = mv.v[p];
      m = h.beta1 * m + (1.0f - h.beta1) * x;
      v = h.beta2 * v + (1.0f - h.beta2) * x * x;
      float first = m * inverse1;
      if (config_.nesterov) first = h.beta1 * first + (1.0f - h.beta1) * x * inverse1;
      s.m[q] = first;
      s.adam[q] = first / (std::sqrt(v * inverse2) + h.epsilon);
    }
  s.product.resize(rc);
  s.direction.resize(rc);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, r, 1.0f, g.left_root.data() + k * ll,
              r, s.m.data(), c, 0.0f, s.product.data(), c);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, c, 1.0f, s.product.data(), c,
              g.right_root.data() + k * rr, c, 0.0f, s.direction.data(), c);
  flops += 4.0 * double(r) * c * (r + c);  // statistics and preconditioning
  if (!all_finite(s.direction)) return false;
  const double shampoo = norm_of(s.direction), adam = norm_of(s.adam);
  const float graft = shampoo > 0 ? static_cast<float>(adam / shampoo) : 0.0f;
  for (uint32_t i = 0; i < r; ++i)
    for (uint32_t j = 0; j < c; ++j) {
      float& w = theta[at(i) + j];
      w -= lr * (graft * s.direction[size_t{i} * c + j] + h.weight_decay * w);
    }
  return true;
}

float effective_damping(const dash_config& config) {
  // 16-bit statistics hold eigenvalues below about one 16-bit step of the largest only as
  // rounding noise (which may even be negative): the damping covers at least that.
  const float epsilon = config.roots.epsilon;
  if (config.storage == dash_storage::bf16) return std::max(epsilon, 1.0f / 128);
  if (config.storage == dash_storage::fp16) return std::max(epsilon, 1.0f / 1024);
  return epsilon;
}

uint32_t dash_matrix::step(std::span<float> theta, std::span<const float> grad, std::span<float> m,
                           std::span<float> v, uint64_t step, float lr) {
  const moments mv{m, v};
  rounding_step_ = step;
  std::vector<std::pair<size_t, size_t>> work;  // (group, block), in order
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t k = 0; k < groups_[gi].size(); ++k) work.emplace_back(gi, k);
  const size_t threads = std::clamp<size_t>(config_.threads, 1, std::max<size_t>(work.size(), 1));
  std::vector<char> failed(work.size(), 0);
  std::vector<double> flops(threads, 0.0);
  // Blocks are independent (disjoint parameters, moments and statistics; seeds per block):
  // thread t takes blocks t, t + threads, ... An exception in a thread (bad_alloc) is carried
  // to the caller after all have finished, as it would be with one thread.
  std::vector<std::exception_ptr> thrown(threads);
  auto run = [&](size_t t) {
    try {
      scratch s;
      for (size_t i = t; i < work.size(); i += threads)
        failed[i] = !step_block(groups_[work[i].first], work[i].second, theta, grad, mv,
                                std::max<uint64_t>(step, 1), lr, s, flops[t]);
    } catch (...) {
      thrown[t] = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> helpers;
    std::vector<size_t> unstarted;  // shares whose thread could not be made: run them here
    for (size_t t = 1; t < threads; ++t) try {
        helpers.emplace_back(run, t);
      } catch (const std::system_error&) {
        unstarted.push_back(t);
      }
    run(0);
    for (size_t t : unstarted) run(t);
  }
  for (const auto& e : thrown)
    if (e) std::rethrow_exception(e);
  uint32_t reset = 0;
  for (size_t i = 0; i < work.size(); ++i)
    if (failed[i]) {
      reset_block(groups_[work[i].first], work[i].second, mv);
      ++reset;
    }
  for (double f : flops) gemm_flops_ += f;
  return reset;
}

size_t dash_matrix::block_values(size_t index) const {
  const auto& g = groups_[index / 4];
  return index % 2 == 0 ? size_t{g.rows} * g.rows : size_t{g.cols} * g.cols;
}

std::vector<float> dash_matrix::state(size_t index) const {
  const auto& g = groups_[index / 4];
  const size_t per = block_values(index);
  switch (index % 4) {
    case 0:
    case 1: {
      std::vector<float> out, block;
      for (size_t k = 0; k < g.size(); ++k) {
        load(g, k, index % 4 == 0, block);
        out.insert(out.end(), block.begin(), block.end());
      }
      return out;
    }
    case 2:
      return std::vector<float>(g.left_root.begin(), g.left_root.begin() + g.size() * per);
    default:
      return std::vector<float>(g.right_root.begin(), g.right_root.begin() + g.size() * per);
  }
}

status dash_matrix::set_state(size_t index, size_t first, std::span<const float> values) {
  if (index >= state_count())
    return failure(errc::shape_mismatch, "saved DASH state this parameter does not have");
  auto& g = groups_[index / 4];
  const size_t per = block_values(index);
  if (values.size() % per != 0 || first + values.size() / per > g.size())
    return failure(errc::shape_mismatch, "saved DASH blocks do not fit the parameter");
  for (float x : values)
    if (!std::isfinite(x)) return failure(errc::non_finite, "saved DASH state is not finite");
  for (size_t b = 0; b < values.size() / per; ++b) {
    const auto block = values.subspan(b * per, per);
    const size_t k = first + b;
    switch (index % 4) {
      case 0:
      case 1:
        store(g, k, index % 4 == 0, block);
        break;
      case 2:
        std::copy(block.begin(), block.end(), g.left_root.begin() + k * per);
        break;
      default:
        std::copy(block.begin(), block.end(), g.right_root.begin() + k * per);
    }
  }
  return {};
}

}  // namespace troupe::kernels
