// Nesterov and delayed Nesterov on the GPU, one thread per value (grid-stride).
//   nesterov:          u <- mu u + g;  theta <- theta - lr (g + mu u)
//   delayed (N, t):    b <- b + g; theta <- theta - lr g / N, and when N divides t:
//                      u <- mu u + b / N; theta <- theta - lr mu u; b <- 0
// CPU reference: kernels/cpu/optimizers.cpp; compared in tests/gpu/nesterov_cuda_test.cpp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/nesterov.hpp"

namespace troupe::kernels::cuda {

namespace {

__global__ void nesterov_kernel(float* theta, float* u, const float* grad, size_t n, float lr,
                                float momentum) {
  for (size_t i : grid_stride{n}) {
    const float ui = momentum * u[i] + grad[i];
    u[i] = ui;
    theta[i] -= lr * (grad[i] + momentum * ui);
  }
}

__global__ void buffer_kernel(float* theta, float* b, const float* grad, size_t n, float lr,
                              float inv) {
  for (size_t i : grid_stride{n}) {
    b[i] += grad[i];
    theta[i] -= lr * inv * grad[i];
  }
}

__global__ void momentum_kernel(float* theta, float* u, float* b, const float* grad, size_t n,
                                float lr, float momentum, float inv) {
  for (size_t i : grid_stride{n}) {
    const float ui = momentum * u[i] + (b[i] + grad[i]) * inv;
    u[i] = ui;
    theta[i] -= lr * (inv * grad[i] + momentum * ui);
    b[i] = 0.0f;
  }
}

}  // namespace

cudaError_t nesterov_step(float* theta, float* velocity, const float* grad, size_t n, float lr,
                          float momentum, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  nesterov_kernel<<<blocks_for(n), threads, 0, stream>>>(theta, velocity, grad, n, lr, momentum);
  return cudaGetLastError();
}

cudaError_t delayed_nesterov_step(float* theta, float* velocity, float* buffer, const float* grad,
                                  size_t n, float lr, float momentum, uint32_t delay, uint64_t t,
                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint32_t every = delay == 0 ? 1 : delay;
  const float inv = 1.0f / static_cast<float>(every);
  if (t % every != 0)
    buffer_kernel<<<blocks_for(n), threads, 0, stream>>>(theta, buffer, grad, n, lr, inv);
  else
    momentum_kernel<<<blocks_for(n), threads, 0, stream>>>(theta, velocity, buffer, grad, n, lr,
                                                           momentum, inv);
  return cudaGetLastError();
}

}  // namespace troupe::kernels::cuda
