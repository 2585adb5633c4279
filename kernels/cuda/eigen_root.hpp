// The eigendecomposition route to inverse 4th roots on the GPU, the baseline DASH's iterative
// roots are measured against there (troupe-bench dash-gpu): per block, cuSOLVER's fp32 syevd
// (A = V diag(w) V^T), damping d = epsilon * max(w), then (A + d I)^{-1/4} = V diag((w +
// d)^{-1/4}) V^T by one strided-batched GEMM. CPU twin: kernels/cpu/inverse_root with
// root_solver::evd (in double); compared in tests/gpu/dash_cuda_test.cpp. Enqueued on the
// handles' stream; returns at once; the caller owns every buffer (C++17 for nvcc).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <cstddef>

namespace troupe::kernels::cuda {

// Device floats eigen_inverse_root needs for `count` n x n blocks at `a` (device; cuSOLVER's
// size query wants a pointer), cuSOLVER's work included; 0 when cuSOLVER cannot say.
size_t eigen_root_workspace_floats(cusolverDnHandle_t solver, const float* a, int n, int count);

// root_k = (a_k + epsilon max eig(a_k) I)^{-1/4} for the `count` stacked symmetric n x n blocks
// of a. `info` is count device ints (cuSOLVER's per-block status: non-zero where syevd failed,
// and that block's root is then not to be used). Binds both handles to `stream`; at most
// 65535 blocks (cudaErrorInvalidValue beyond).
cudaError_t eigen_inverse_root(cusolverDnHandle_t solver, cublasHandle_t blas, cudaStream_t stream,
                               const float* a, float* root, int n, int count, float epsilon,
                               float* workspace, int* info);

}  // namespace troupe::kernels::cuda
