// Adam update on device buffers: the CUDA twin of kernels::adam_step (kernels/cpu/
// optimizers.hpp), same math and hyper-parameters. Enqueues on `stream` and returns at once;
// the caller owns the buffers and synchronises through the stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/adam_hyper.hpp"

namespace troupe::kernels::cuda {

// Returns cudaSuccess or the launch error; never throws.
cudaError_t adam_step(float* theta, float* m, float* v, const float* grad, size_t n,
                      const adam_hyper& h, cudaStream_t stream);

}  // namespace troupe::kernels::cuda
