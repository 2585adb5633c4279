// The CUDA DASH group step against its CPU twin (kernels/cpu/dash.cpp, coupled Newton): a
// 300 x 200 parameter in 128 x 128 blocks (four groups: full, narrow, short, corner), three
// steps with the roots each step, then a NaN in one block: it is reset and counted, and its
// parameters do not move. And the GPU's two roots (the batched Newton schedule and cuSOLVER's
// eigendecomposition) against the CPU reference. Skipped (not failed) on a machine without a
// usable GPU.
#define BOOST_TEST_MODULE dash_cuda
#include <boost/test/unit_test.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/dash.hpp"
#include "kernels/cpu/inverse_root.hpp"
#include "kernels/cuda/dash.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/eigen_root.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace {

using namespace troupe::kernels;
using troupe::testing::device_array;
using troupe::testing::has_gpu;
using troupe::testing::normal_values;

// The device state of one group of a CPU dash_matrix's layout.
struct device_group {
  device_array<uint32_t> row0, col0;
  device_array<float> left, right, left_root, right_root, m, v, workspace;
  device_array<int> resets{1};
  cuda::dash_group_buffers buffers;

  explicit device_group(const dash_group& g)
      : row0(g.size(), g.row0.data()),
        col0(g.size(), g.col0.data()),
        left(g.size() * g.rows * g.rows),
        right(g.size() * g.cols * g.cols),
        left_root(g.size() * g.rows * g.rows),
        right_root(g.size() * g.cols * g.cols),
        m(g.size() * g.rows * g.cols),
        v(g.size() * g.rows * g.cols),
        workspace(cuda::dash_workspace_floats(g.rows, g.cols, static_cast<int>(g.size()))) {
    buffers = cuda::dash_group_buffers{static_cast<int>(g.rows),
                                       static_cast<int>(g.cols),
                                       static_cast<int>(g.size()),
                                       row0.ptr,
                                       col0.ptr,
                                       left.ptr,
                                       right.ptr,
                                       left_root.ptr,
                                       right_root.ptr,
                                       m.ptr,
                                       v.ptr,
                                       workspace.ptr,
                                       resets.ptr};
    BOOST_REQUIRE(cuda::dash_group_init(buffers, nullptr) == cudaSuccess);
  }
};

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_gpu_step_matches_the_cpu_twin, *boost::unit_test::precondition(has_gpu)) {
  const uint32_t rows = 300, cols = 200;
  dash_config config;
  config.block = 128;
  config.frequency = 1;
  config.roots.solver = root_solver::coupled_newton;
  config.adam.lr = 1e-3f;
  dash_matrix cpu{rows, cols, config};
  std::vector<float> theta = normal_values(size_t{rows} * cols, 1, 1.0f);
  std::vector<float> m(theta.size()), v(theta.size());
  device_array<float> d_theta(theta.size(), theta.data());
  std::vector<std::unique_ptr<device_group>> groups;
  for (const auto& g : cpu.groups()) groups.push_back(std::make_unique<device_group>(g));
  cublasHandle_t handle;
  BOOST_REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  auto step_both = [&](const std::vector<float>& grad, uint64_t step) {
    const auto before = theta;
    cpu.step(theta, grad, m, v, step, config.adam.lr);
    device_array<float> d_grad(grad.size(), grad.data());
    const auto gpu_before = d_theta.to_host();
    cuda::dash_step_params p;
    p.lr = config.adam.lr;
    p.beta = config.beta;
    p.damping = config.roots.epsilon;
    p.step = step;
    p.compute_roots = true;
    for (auto& g : groups)
      BOOST_REQUIRE(cuda::dash_group_step(handle, nullptr, d_theta.ptr, d_grad.ptr,
                                          static_cast<int>(cols), g->buffers, p) == cudaSuccess);
    BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const auto after = d_theta.to_host();
    std::vector<float> cpu_change(theta.size()), gpu_change(theta.size());
    for (size_t i = 0; i < theta.size(); ++i) {
      cpu_change[i] = theta[i] - before[i];
      gpu_change[i] = after[i] - gpu_before[i];
    }
    return relative_difference(gpu_change, cpu_change);
  };
  for (uint64_t step = 1; step <= 3; ++step) {
    const double difference = step_both(normal_values(theta.size(), 10 + step, 0.1f), step);
    BOOST_TEST(difference < 1e-2, "step " << step << ": relative difference " << difference);
  }
  // A NaN in the first block: reset and counted on both; its parameters stay.
  auto grad = normal_values(theta.size(), 20, 0.1f);
  grad[0] = NAN;
  const auto before = d_theta.to_host();
  step_both(grad, 4);
  const auto after = d_theta.to_host();
  BOOST_TEST(after[0] == before[0]);
  BOOST_TEST(after[size_t{cols} + 1] == before[size_t{cols} + 1]);
  int resets = 0;
  for (auto& g : groups) resets += g->resets.to_host()[0];
  BOOST_TEST(resets == 1);
  BOOST_TEST(cpu.resets() == 1u);
  for (float x : after) BOOST_TEST_REQUIRE(std::isfinite(x));
  cublasDestroy(handle);
}

namespace {

// Symmetric positive definite blocks, stacked: G G^T / n plus a ridge of 1e-3 (condition up
// to about 4e3).
std::vector<float> spd_blocks(int n, int count, uint32_t seed) {
  const auto g = normal_values(size_t(n) * n * count, seed, 1.0f);
  std::vector<float> a(size_t(n) * n * count, 0.0f);
  for (int k = 0; k < count; ++k) {
    const float* gk = g.data() + size_t(k) * n * n;
    float* ak = a.data() + size_t(k) * n * n;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c <= r; ++c) {
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += double(gk[r * n + j]) * gk[c * n + j];
        ak[r * n + c] = ak[c * n + r] = static_cast<float>(sum / n + (r == c ? 1e-3 : 0.0));
      }
  }
  return a;
}

}  // namespace

BOOST_AUTO_TEST_CASE(both_gpu_roots_match_the_cpu_reference,
                     *boost::unit_test::precondition(has_gpu)) {
  for (int n : {64, 256}) {
    const int count = 3;
    const auto a = spd_blocks(n, count, 40 + static_cast<uint32_t>(n));
    const size_t nn = size_t(n) * n;
    std::vector<float> reference(nn * count);
    root_options o;
    o.solver = root_solver::evd;
    for (int k = 0; k < count; ++k)
      BOOST_REQUIRE(static_cast<bool>(
          inverse_root({a.data() + k * nn, nn}, n, 4, {reference.data() + k * nn, nn}, o)));
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    BOOST_REQUIRE(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
    BOOST_REQUIRE(cusolverDnCreate(&solver) == CUSOLVER_STATUS_SUCCESS);
    device_array<float> d_a(a), newton_root(nn * count), eigen_root(nn * count);
    device_array<float> newton_work(cuda::dash_workspace_floats(n, n, count));
    const size_t eigen_floats = cuda::eigen_root_workspace_floats(solver, d_a.ptr, n, count);
    BOOST_REQUIRE(eigen_floats > 0u);
    device_array<float> eigen_work(eigen_floats);
    device_array<int> info(count);
    cuda::dash_step_params p;
    p.damping = o.epsilon;
    BOOST_REQUIRE(cuda::batched_inverse_root(blas, nullptr, d_a.ptr, newton_root.ptr, n, count, p,
                                             newton_work.ptr) == cudaSuccess);
    BOOST_REQUIRE(cuda::eigen_inverse_root(solver, blas, nullptr, d_a.ptr, eigen_root.ptr, n, count,
                                           o.epsilon, eigen_work.ptr, info.ptr) == cudaSuccess);
    BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    for (int status : info.to_host()) BOOST_TEST(status == 0);
    BOOST_TEST(relative_difference(newton_root.to_host(), reference) < 1e-3, "newton n " << n);
    BOOST_TEST(relative_difference(eigen_root.to_host(), reference) < 1e-3, "eigen n " << n);
    cusolverDnDestroy(solver);
    cublasDestroy(blas);
  }
}
