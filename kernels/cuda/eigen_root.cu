#include "kernels/cuda/eigen_root.hpp"

#include "kernels/cuda/common.cuh"

namespace troupe::kernels::cuda {

namespace {

// scaled_k[:, j] = v_k[:, j] (w_kj + d_k)^{-1/4} with d_k = epsilon * w_k[n - 1] (the largest;
// syevd sorts ascending), column-major; eigenvalues that rounding left at or below zero are
// clamped, as the CPU twin clamps them.
__global__ void scale_columns_kernel(const float* v, const float* w, float* scaled, int n,
                                     float epsilon) {
  const size_t k = blockIdx.y;
  const size_t nn = static_cast<size_t>(n) * n;
  const float d = epsilon * fmaxf(w[k * n + n - 1], 0.0f);
  for (size_t i : grid_stride{nn}) {
    const size_t column = i / n;
    const float lambda = fmaxf(w[k * n + column] + d, 1e-30f);
    scaled[k * nn + i] = v[k * nn + i] * rsqrtf(sqrtf(lambda));
  }
}

struct eigen_workspace {
  float *v, *w, *scaled, *work;
  int lwork;
  eigen_workspace(float* base, int n, int count, int work_floats) {
    const size_t nn = static_cast<size_t>(n) * n * count;
    v = base, base += nn;
    scaled = base, base += nn;
    w = base, base += static_cast<size_t>(n) * count;
    work = base;
    lwork = work_floats;
  }
};

// syevd's work floats for n x n; cuSOLVER's query wants device pointers (it reads neither).
int syevd_work(cusolverDnHandle_t solver, int n, const float* a, const float* w) {
  int lwork = 0;
  if (cusolverDnSsyevd_bufferSize(solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n, a, n,
                                  w, &lwork) != CUSOLVER_STATUS_SUCCESS)
    return -1;
  return lwork;
}

}  // namespace

size_t eigen_root_workspace_floats(cusolverDnHandle_t solver, const float* a, int n, int count) {
  const int lwork = syevd_work(solver, n, a, a);
  if (lwork < 0) return 0;
  return 2 * static_cast<size_t>(n) * n * count + static_cast<size_t>(n) * count + lwork;
}

cudaError_t eigen_inverse_root(cusolverDnHandle_t solver, cublasHandle_t blas, cudaStream_t stream,
                               const float* a, float* root, int n, int count, float epsilon,
                               float* workspace, int* info) {
  if (count == 0) return cudaSuccess;
  if (count > 65535) return cudaErrorInvalidValue;  // the scaling kernel's grid.y
  if (cusolverDnSetStream(solver, stream) != CUSOLVER_STATUS_SUCCESS ||
      cublasSetStream(blas, stream) != CUBLAS_STATUS_SUCCESS)
    return cudaErrorUnknown;
  eigen_workspace ws{workspace, n, count, 0};
  ws.lwork = syevd_work(solver, n, ws.v, ws.w);
  if (ws.lwork < 0) return cudaErrorUnknown;
  const size_t nn = static_cast<size_t>(n) * n;
  cudaError_t err =
      cudaMemcpyAsync(ws.v, a, nn * count * sizeof(float), cudaMemcpyDeviceToDevice, stream);
  if (err != cudaSuccess) return err;
  for (int k = 0; k < count; ++k)  // cuSOLVER has no batched syevd for n > 32
    if (cusolverDnSsyevd(solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n, ws.v + k * nn,
                         n, ws.w + static_cast<size_t>(k) * n, ws.work, ws.lwork,
                         info + k) != CUSOLVER_STATUS_SUCCESS)
      return cudaErrorUnknown;
  const dim3 grid(static_cast<unsigned>(blocks_for(nn, 1024)), static_cast<unsigned>(count));
  scale_columns_kernel<<<grid, threads, 0, stream>>>(ws.v, ws.w, ws.scaled, n, epsilon);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  // root = scaled V^T (column-major; symmetric, so the same read row-major).
  const float one = 1.0f, zero = 0.0f;
  const long long stride = static_cast<long long>(nn);
  if (cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, n, n, n, &one, ws.scaled, n, stride,
                                ws.v, n, stride, &zero, root, n, stride,
                                count) != CUBLAS_STATUS_SUCCESS)
    return cudaErrorUnknown;
  return cudaGetLastError();
}

}  // namespace troupe::kernels::cuda
