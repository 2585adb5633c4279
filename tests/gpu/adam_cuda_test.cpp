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

namespace {

struct has_gpu {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result result{troupe::kernels::cuda::device_count() > 0};
    result.message() << "no usable CUDA device";
    return result;
  }
};

std::vector<float> random_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng{seed};
  std::normal_distribution<float> dist{0.0f, scale};
  std::vector<float> out(n);
  for (auto& x : out) x = dist(rng);
  return out;
}

// Device copy of a host vector, freed by the destructor.
struct device_buffer {
  float* ptr = nullptr;
  size_t n = 0;
  explicit device_buffer(const std::vector<float>& host) : n(host.size()) {
    BOOST_REQUIRE(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(float)) == cudaSuccess);
    if (n)
      BOOST_REQUIRE(cudaMemcpy(ptr, host.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~device_buffer() { cudaFree(ptr); }
  std::vector<float> to_host() const {
    std::vector<float> out(n);
    if (n) BOOST_REQUIRE(cudaMemcpy(out.data(), ptr, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
};

void compare_steps(size_t n, float weight_decay) {
  auto theta = random_values(n, 1, 1.0f);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  device_buffer d_theta{theta}, d_m{m}, d_v{v};
  for (uint64_t step = 1; step <= 4; ++step) {
    const auto grad = random_values(n, 100 + static_cast<uint32_t>(step), 0.5f);
    device_buffer d_grad{grad};
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

BOOST_AUTO_TEST_CASE(adam_kernel_matches_the_cpu_twin, *boost::unit_test::precondition(has_gpu{})) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{255}, size_t{257}, size_t{1000003}}) {
    BOOST_TEST_CONTEXT("n = " << n) {
      compare_steps(n, 0.0f);
      compare_steps(n, 0.01f);
    }
  }
}

// tests/gpu/run.sh sets TROUPE_REQUIRE_GPU=1: there a missing GPU is a failure, not a skip.
BOOST_AUTO_TEST_CASE(a_gpu_is_present_when_required) {
  const char* required = std::getenv("TROUPE_REQUIRE_GPU");
  if (required && std::string{required} == "1")
    BOOST_TEST(troupe::kernels::cuda::device_count() > 0);
}
