// The DASH step of one group of same-shape blocks on the GPU: the CUDA twin of
// kernels::dash_matrix::step (kernels/cpu/dash.hpp) with the coupled-Newton roots, on stacked
// device tensors and cuBLAS strided-batched GEMMs, so that every block of the group moves in
// one launch per operation. Differences from the CPU twin, by design: Adam's moments are
// stacked like the blocks (not in the parameter's layout), the roots take one schedule of
// Newton steps chosen on the host for the sure interval [damping, 1] (no host round trip to
// test convergence, no per-block estimate of the smallest eigenvalue), and each block's
// largest eigenvalue comes from a fixed number of batched power iterations. Everything is enqueued
// on `stream` and the call returns at once; the caller owns every buffer (C++17 for nvcc).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace troupe::kernels::cuda {

// Device buffers of one group: `count` blocks of rows x cols.
struct dash_group_buffers {
  int rows = 0, cols = 0, count = 0;
  const uint32_t* row0 = nullptr;  // each block's origin in the parameter (device)
  const uint32_t* col0 = nullptr;
  float* left = nullptr;        // count x rows x rows statistics
  float* right = nullptr;       // count x cols x cols
  float* left_root = nullptr;   // L^{-1/4}, same shape as left (identity before the first roots)
  float* right_root = nullptr;  // R^{-1/4}
  float* m = nullptr;           // Adam's moments, count x rows x cols
  float* v = nullptr;
  float* workspace = nullptr;  // dash_workspace_floats(rows, cols, count) floats
  int* resets = nullptr;       // blocks reset so far (device counter, atomically increased)
};

struct dash_step_params {
  float lr = 1e-3f;
  float beta = 0.999f;  // statistics' decay
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, weight_decay = 0.0f;
  float damping = 1e-6f;  // relative to each block's largest eigenvalue
  bool nesterov = false;
  uint64_t step = 1;           // 1-based
  bool compute_roots = false;  // this step recomputes L^{-1/4} and R^{-1/4}
  // Most coupled-Newton steps per root. The steps are chosen for the sure interval
  // [damping / (1 + damping), 1] (kernels/cpu/newton_steps), the same for every block: with
  // damping 1e-6 that is 10 chosen steps and 3 classic ones (classic steps alone need ~19);
  // a smaller cap cuts the schedule short and leaves roots unconverged.
  int newton_iterations = 25;
  int power_iterations = 50;  // batched power iterations per largest eigenvalue
};

// Floats of workspace one group step needs.
size_t dash_workspace_floats(int rows, int cols, int count);

// root = (a + damping)^{-1/4} for `count` stacked n x n blocks, as a group step computes its
// roots (batched power iteration, then the Newton schedule); `workspace` holds
// dash_workspace_floats(n, n, count) floats. For benchmarks and tests of the roots alone.
cudaError_t batched_inverse_root(cublasHandle_t handle, cudaStream_t stream, const float* a,
                                 float* root, int n, int count, const dash_step_params& p,
                                 float* workspace);

// Sets the roots of every block to the identity (call once after allocating).
cudaError_t dash_group_init(const dash_group_buffers& g, cudaStream_t stream);

// One step of every block of the group on theta (param_cols wide, row-major) with grad.
// Returns the first CUDA or cuBLAS failure as a cudaError_t (cuBLAS failures as
// cudaErrorUnknown); never throws.
cudaError_t dash_group_step(cublasHandle_t handle, cudaStream_t stream, float* theta,
                            const float* grad, int param_cols, const dash_group_buffers& g,
                            const dash_step_params& p);

}  // namespace troupe::kernels::cuda
