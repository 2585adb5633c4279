// Adam with decoupled weight decay on the GPU.
//   m <- b1 m + (1-b1) g          v <- b2 v + (1-b2) g^2
//   theta <- theta - lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * theta )
// CPU reference: kernels/cpu/optimizers.cpp (adam_step); compared in tests/gpu.
#include <cmath>

#include "kernels/cuda/adam.hpp"
#include "kernels/cuda/common.cuh"

namespace troupe::kernels::cuda {

namespace {

// ----------------------------------------------------------------------------------------------
// kernel: one thread per element, grid-stride so any n fits any grid.

__global__ void adam_kernel(float* theta, float* m, float* v, const float* grad, size_t n,
                            float beta1, float beta2, float epsilon, float lr, float weight_decay,
                            float l2, float step_size, float inv_sqrt_c2) {
  for (size_t i : grid_stride{n}) {
    const float g = grad[i] + l2 * theta[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) * inv_sqrt_c2 + epsilon;
    theta[i] -= step_size * mi / denom + lr * weight_decay * theta[i];
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launcher

cudaError_t adam_step(float* theta, float* m, float* v, const float* grad, size_t n,
                      const adam_hyper& h, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const double t = static_cast<double>(h.step);
  const float correction1 = static_cast<float>(1.0 - std::pow(double{h.beta1}, t));
  const float correction2 = static_cast<float>(1.0 - std::pow(double{h.beta2}, t));
  adam_kernel<<<blocks_for(n), threads, 0, stream>>>(
      theta, m, v, grad, n, h.beta1, h.beta2, h.epsilon, h.lr, h.weight_decay, h.l2, h.lr / correction1,
      1.0f / std::sqrt(correction2));
  return cudaGetLastError();
}

}  // namespace troupe::kernels::cuda
