// DiLoCo's outer optimizers on device buffers: the CUDA twins of kernels::nesterov_step and
// kernels::delayed_nesterov_step (kernels/cpu/optimizers.hpp), same math and arguments, for a
// bucket that holds its values on a GPU. Enqueues on `stream` and returns at once; the caller
// owns the buffers and synchronises through the stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace troupe::kernels::cuda {

// Each returns cudaSuccess or the launch error; never throws.
cudaError_t nesterov_step(float* theta, float* velocity, const float* grad, size_t n, float lr,
                          float momentum, cudaStream_t stream);
cudaError_t delayed_nesterov_step(float* theta, float* velocity, float* buffer, const float* grad,
                                  size_t n, float lr, float momentum, uint32_t delay, uint64_t t,
                                  cudaStream_t stream);

}  // namespace troupe::kernels::cuda
