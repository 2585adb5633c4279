// The CUDA Nesterov and delayed Nesterov kernels (DiLoCo's outer optimizers) against their CPU
// twins (kernels/cpu/optimizers.cpp) at sizes 0, 1, odd, and not a multiple of the block size,
// over several updates (delayed: a momentum step every third), with absolute + relative
// tolerance. Skipped (not failed) on a machine without a usable GPU.
#define BOOST_TEST_MODULE nesterov_cuda
#include <boost/test/unit_test.hpp>

#include <cuda_runtime.h>

#include <vector>

#include "kernels/cpu/optimizers.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/nesterov.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace {

using troupe::testing::device_array;
using troupe::testing::has_gpu;
using troupe::testing::normal_values;

bool near(float a, float b) {
  return std::abs(a - b) <= 1e-6f + 1e-5f * std::abs(b);
}

void compare_updates(size_t n, bool delayed) {
  auto theta = normal_values(n, 1, 1.0f);
  std::vector<float> u(n, 0.0f), b(n, 0.0f);
  device_array<float> d_theta{theta}, d_u{u}, d_b{b};
  const float lr = 0.7f, mu = 0.9f;
  for (uint64_t t = 1; t <= 7; ++t) {
    const auto grad = normal_values(n, 100 + static_cast<uint32_t>(t), 0.1f);
    device_array<float> d_grad{grad};
    if (delayed) {
      troupe::kernels::delayed_nesterov_step(theta, u, b, grad, lr, mu, 3, t);
      BOOST_REQUIRE(troupe::kernels::cuda::delayed_nesterov_step(d_theta.ptr, d_u.ptr, d_b.ptr,
                                                                 d_grad.ptr, n, lr, mu, 3, t,
                                                                 nullptr) == cudaSuccess);
    } else {
      troupe::kernels::nesterov_step(theta, u, grad, lr, mu);
      BOOST_REQUIRE(troupe::kernels::cuda::nesterov_step(d_theta.ptr, d_u.ptr, d_grad.ptr, n, lr,
                                                         mu, nullptr) == cudaSuccess);
    }
    BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  const auto gpu_theta = d_theta.to_host();
  const auto gpu_u = d_u.to_host();
  const auto gpu_b = d_b.to_host();
  for (size_t i = 0; i < n; ++i) {
    BOOST_TEST_REQUIRE(near(gpu_theta[i], theta[i]), "value " << i);
    BOOST_TEST_REQUIRE(near(gpu_u[i], u[i]), "velocity " << i);
    BOOST_TEST_REQUIRE(near(gpu_b[i], b[i]), "buffer " << i);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(nesterov_kernels_match_the_cpu_twins,
                     *boost::unit_test::precondition(has_gpu)) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{255}, size_t{257}, size_t{1000003}}) {
    BOOST_TEST_CONTEXT("n = " << n) {
      compare_updates(n, false);
      compare_updates(n, true);
    }
  }
}

// tests/gpu/run.sh sets TROUPE_REQUIRE_GPU=1: there a missing GPU is a failure, not a skip.
BOOST_AUTO_TEST_CASE(a_gpu_is_present_when_required) {
  if (troupe::testing::gpu_required()) BOOST_TEST(troupe::kernels::cuda::device_count() > 0);
}
