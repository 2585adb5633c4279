// What the GPU tests share: the precondition that skips a test where no GPU is visible, whether
// run.sh requires one, normal random values from a fixed seed, and a device array that copies
// in and out and frees itself.
// For tests/gpu only.
#pragma once

#include <cuda_runtime.h>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device.hpp"

namespace troupe::testing {

// The precondition of a GPU test: precondition(has_gpu) skips it where no GPU is visible.
inline boost::test_tools::assertion_result has_gpu(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result result{kernels::cuda::device_count() > 0};
  result.message() << "no usable CUDA device";
  return result;
}

// tests/gpu/run.sh sets TROUPE_REQUIRE_GPU=1: there a missing GPU is a failure, not a skip.
inline bool gpu_required() {
  const char* required = std::getenv("TROUPE_REQUIRE_GPU");
  return required && std::string{required} == "1";
}

inline std::vector<float> normal_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng{seed};
  std::normal_distribution<float> dist{0.0f, scale};
  std::vector<float> out(n);
  for (auto& x : out) x = dist(rng);
  return out;
}

// `count` values of T on the device, zeroed or copied from `host`; freed by the destructor.
template <class T>
struct device_array {
  T* ptr = nullptr;
  size_t n = 0;
  explicit device_array(size_t count, const T* host = nullptr) : n(count) {
    BOOST_REQUIRE(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess);
    BOOST_REQUIRE(cudaMemset(ptr, 0, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess);
    if (host && n)
      BOOST_REQUIRE(cudaMemcpy(ptr, host, n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  explicit device_array(const std::vector<T>& host) : device_array(host.size(), host.data()) {}
  ~device_array() { cudaFree(ptr); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  std::vector<T> to_host() const {
    std::vector<T> out(n);
    if (n)
      BOOST_REQUIRE(cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
    return out;
  }
};

}  // namespace troupe::testing
