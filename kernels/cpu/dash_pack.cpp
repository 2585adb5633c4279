#include "kernels/cpu/dash_pack.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/status.hpp"

namespace troupe::kernels {

namespace {

// Each tensor starts on a 256-byte boundary of the device buffer.
size_t aligned(size_t offset) {
  return (offset + 63) / 64 * 64;
}

// Reserves `floats` at the end of the layout and returns where they start.
size_t reserve(size_t& end, size_t floats) {
  const size_t at = aligned(end);
  end = at + floats;
  return at;
}

template <class T>
float bits_as_float(T x) {
  static_assert(sizeof(T) == sizeof(float));
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

int32_t float_bits_as_int(float f) {
  int32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

// Copies block k of group g between the parameter's layout and the stacked one.
void stack_block(const dash_group& g, size_t k, uint32_t param_cols, std::span<const float> from,
                 float* to) {
  for (uint32_t i = 0; i < g.rows; ++i)
    std::memcpy(to + (k * g.rows + i) * g.cols,
                from.data() + size_t{g.row0[k] + i} * param_cols + g.col0[k],
                g.cols * sizeof(float));
}

void unstack_block(const dash_group& g, size_t k, uint32_t param_cols, const float* from,
                   std::span<float> to) {
  for (uint32_t i = 0; i < g.rows; ++i)
    std::memcpy(to.data() + size_t{g.row0[k] + i} * param_cols + g.col0[k],
                from + (k * g.rows + i) * g.cols, g.cols * sizeof(float));
}

packed_group layout_of(const dash_group& g, size_t& end) {
  packed_group p;
  p.rows = g.rows;
  p.cols = g.cols;
  p.count = static_cast<uint32_t>(g.size());
  const size_t n = g.size();
  p.row0 = reserve(end, n);
  p.col0 = reserve(end, n);
  p.left = reserve(end, n * g.rows * g.rows);
  p.right = reserve(end, n * g.cols * g.cols);
  p.left_root = reserve(end, n * g.rows * g.rows);
  p.right_root = reserve(end, n * g.cols * g.cols);
  p.m = reserve(end, n * g.rows * g.cols);
  p.v = reserve(end, n * g.rows * g.cols);
  p.resets = reserve(end, 1);
  return p;
}

}  // namespace

size_t packed_floats(const dash_matrix& dash) {
  size_t end = 0;
  reserve(end, size_t{dash.rows()} * dash.cols());
  reserve(end, size_t{dash.rows()} * dash.cols());
  for (const auto& g : dash.groups()) layout_of(g, end);
  return end;
}

bool gpu_can_step(const dash_config& config) {
  return config.roots.solver == root_solver::coupled_newton &&
         config.roots.scaling == root_scaling::power_iteration;
}

packed_dash_step pack_dash_step(const dash_matrix& dash, std::span<const float> theta,
                                std::span<const float> grad, std::span<const float> m,
                                std::span<const float> v, uint64_t step, float lr,
                                std::shared_ptr<std::vector<float>> reuse) {
  const auto& c = dash.config();
  packed_dash_step out;
  out.rows = dash.rows();
  out.cols = dash.cols();
  out.hyper = packed_hyper{lr,
                           c.beta,
                           c.adam.beta1,
                           c.adam.beta2,
                           c.adam.epsilon,
                           c.adam.weight_decay,
                           effective_damping(c),
                           c.nesterov,
                           step,
                           (step - 1) % std::max<uint32_t>(c.frequency, 1) == 0};
  size_t end = 0;
  const size_t size = size_t{out.rows} * out.cols;
  out.theta = reserve(end, size);
  out.grad = reserve(end, size);
  for (const auto& g : dash.groups()) out.groups.push_back(layout_of(g, end));
  const bool reusable = reuse && reuse.use_count() == 1 && reuse->capacity() >= end;
  out.values = reusable ? std::move(reuse) : std::make_shared<std::vector<float>>();
  out.values->resize(end);
  float* base = out.values->data();
  std::memcpy(base + out.theta, theta.data(), size * sizeof(float));
  std::memcpy(base + out.grad, grad.data(), size * sizeof(float));
  for (size_t gi = 0; gi < dash.groups().size(); ++gi) {
    const auto& g = dash.groups()[gi];
    const auto& p = out.groups[gi];
    base[p.resets] = 0;  // the device counts its resets here
    for (size_t k = 0; k < g.size(); ++k) {
      base[p.row0 + k] = bits_as_float(g.row0[k]);
      base[p.col0 + k] = bits_as_float(g.col0[k]);
      stack_block(g, k, out.cols, m, base + p.m);
      stack_block(g, k, out.cols, v, base + p.v);
    }
    const size_t at[4] = {p.left, p.right, p.left_root, p.right_root};
    for (size_t s = 0; s < 4; ++s) {
      const auto state = dash.state(gi * 4 + s);
      std::memcpy(base + at[s], state.data(), state.size() * sizeof(float));
    }
  }
  return out;
}

result<uint32_t> unpack_dash_step(const packed_dash_step& done, dash_matrix& dash,
                                  std::span<float> theta, std::span<float> m, std::span<float> v) {
  const size_t size = size_t{dash.rows()} * dash.cols();
  if (theta.size() != size || m.size() != size || v.size() != size)
    return failure(errc::shape_mismatch, "moments of another shape than the parameter");
  // The layout is this parameter's own, field by field: the offsets below are then known to
  // lie inside the values.
  size_t end = 0;
  bool same = done.values && done.rows == dash.rows() && done.cols == dash.cols() &&
              done.theta == reserve(end, size) && done.grad == reserve(end, size) &&
              done.groups.size() == dash.groups().size();
  for (size_t gi = 0; same && gi < dash.groups().size(); ++gi) {
    const auto e = layout_of(dash.groups()[gi], end);
    const auto& p = done.groups[gi];
    same = p.rows == e.rows && p.cols == e.cols && p.count == e.count && p.row0 == e.row0 &&
           p.col0 == e.col0 && p.left == e.left && p.right == e.right &&
           p.left_root == e.left_root && p.right_root == e.right_root && p.m == e.m && p.v == e.v &&
           p.resets == e.resets;
  }
  if (!same || done.values->size() != end)
    return failure(errc::shape_mismatch, "a stepped DASH package of another layout");
  const std::vector<float>& values = *done.values;
  // What will be written is checked before anything is: a device that returned non-finite
  // values (which its own resets should have prevented) changes nothing here. (The gradient
  // is not written back: a non-finite one is the device's to reset, not a refusal.)
  auto finite = [&](size_t from, size_t count) {
    return std::all_of(values.begin() + from, values.begin() + from + count,
                       [](float x) { return std::isfinite(x); });
  };
  bool ok = finite(done.theta, size);
  for (const auto& p : done.groups) {
    const size_t rr = size_t{p.count} * p.rows * p.rows, cc = size_t{p.count} * p.cols * p.cols;
    const size_t rc = size_t{p.count} * p.rows * p.cols;
    ok = ok && finite(p.left, rr) && finite(p.right, cc) && finite(p.left_root, rr) &&
         finite(p.right_root, cc) && finite(p.m, rc) && finite(p.v, rc);
  }
  if (!ok) return failure(errc::non_finite, "the device returned non-finite DASH values");
  // The statistics and roots first (set_state checks again), the parameter last.
  const float* base = values.data();
  dash.set_rounding_step(done.hyper.step);  // 16-bit statistics round as the CPU step would
  uint32_t resets = 0;
  for (size_t gi = 0; gi < dash.groups().size(); ++gi) {
    const auto& g = dash.groups()[gi];
    const auto& p = done.groups[gi];
    const size_t at[4] = {p.left, p.right, p.left_root, p.right_root};
    for (size_t s = 0; s < 4; ++s) {
      const size_t count = g.size() * dash.block_values(gi * 4 + s);
      if (auto done = dash.set_state(gi * 4 + s, 0, {base + at[s], count}); !done.ok()) return done;
    }
    for (size_t k = 0; k < g.size(); ++k) {
      unstack_block(g, k, done.cols, base + p.m, m);
      unstack_block(g, k, done.cols, base + p.v, v);
    }
    resets += static_cast<uint32_t>(std::max(float_bits_as_int(base[p.resets]), 0));
  }
  std::memcpy(theta.data(), base + done.theta, size * sizeof(float));
  return resets;
}

}  // namespace troupe::kernels
