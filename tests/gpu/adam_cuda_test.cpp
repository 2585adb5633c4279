// The CUDA Adam kernel against its CPU twin (kernels/cpu/optimizers.cpp) at sizes 0, 1, odd,
// and not a multiple of the block size, over several steps, with absolute + relative
// tolerance. Skipped (not failed) on a machine without a usable GPU.
#define BOOST_TEST_MODULE adam_cuda
#include <boost/test/unit_test.hpp>

#include <cuda_runtime.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/optimizers.hpp"
#include "kernels/cuda/adam.hpp"
#include "kernels/cuda/device.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace {

using troupe::testing::device_array;
using troupe::testing::has_gpu;
using troupe::testing::normal_values;

void compare_steps(size_t n, float weight_decay) {
  auto theta = normal_values(n, 1, 1.0f);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  device_array<float> d_theta{theta}, d_m{m}, d_v{v};
  for (uint64_t step = 1; step <= 4; ++step) {
    const auto grad = normal_values(n, 100 + static_cast<uint32_t>(step), 0.5f);
    device_array<float> d_grad{grad};
    troupe::kernels::adam_hyper h;
    h.lr = 0.01f;
    h.weight_decay = weight_decay;
    h.step = step;
    troupe::kernels::adam_step(theta, m, v, grad, h);
    BOOST_REQUIRE(troupe::kernels::cuda::adam_step(d_theta.ptr, d_m.ptr, d_v.ptr, d_grad.ptr, n, h,
                                                   nullptr) == cudaSuccess);
    BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  const auto gpu_theta = d_theta.to_host();
  const auto gpu_m = d_m.to_host();
  for (size_t i = 0; i < n; ++i) {
    BOOST_TEST(std::abs(gpu_theta[i] - theta[i]) <= 1e-6f + 1e-5f * std::abs(theta[i]));
    BOOST_TEST(std::abs(gpu_m[i] - m[i]) <= 1e-6f + 1e-5f * std::abs(m[i]));
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(adam_kernel_matches_the_cpu_twin, *boost::unit_test::precondition(has_gpu)) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{255}, size_t{257}, size_t{1000003}}) {
    BOOST_TEST_CONTEXT("n = " << n) {
      compare_steps(n, 0.0f);
      compare_steps(n, 0.01f);
    }
  }
}

// tests/gpu/run.sh sets TROUPE_REQUIRE_GPU=1: there a missing GPU is a failure, not a skip.
BOOST_AUTO_TEST_CASE(a_gpu_is_present_when_required) {
  if (troupe::testing::gpu_required()) BOOST_TEST(troupe::kernels::cuda::device_count() > 0);
}
