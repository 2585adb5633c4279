// DASH on the GPU for one group of stacked blocks: statistics, coupled-Newton inverse 4th roots,
// preconditioning and Adam grafting, with non-finite blocks reset. CPU twin:
// kernels/cpu/dash.cpp (dash_matrix::step with root_solver::coupled_newton); compared in
// tests/gpu/dash_cuda_test.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/newton_steps.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dash.hpp"

namespace troupe::kernels::cuda {

namespace {

constexpr int root_p = 4;

struct add {
  __device__ float operator()(float l, float r) const { return l + r; }
};
constexpr add sum{};

// Row-major C = alpha A B + beta C for `count` stacked (m x k) (k x n) products.
cublasStatus_t gemm_rm(cublasHandle_t h, int m, int n, int k, float alpha, const float* a,
                       long long stride_a, const float* b, long long stride_b, float beta, float* c,
                       long long stride_c, int count) {
  return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, n, stride_b, a,
                                   k, stride_a, &beta, c, n, stride_c, count);
}

// -- kernels -----------------------------------------------------------------------------------

// The gradient's blocks, stacked; every block's flag cleared (the step's first kernel).
__global__ void gather_kernel(const float* from, int param_cols, const uint32_t* row0,
                              const uint32_t* col0, int rows, int cols, int count, float* to,
                              float* flags) {
  const size_t per = static_cast<size_t>(rows) * cols;
  for (size_t i : grid_stride{per * count}) {
    if (i < static_cast<size_t>(count)) flags[i] = 0.0f;
    const size_t k = i / per, e = i % per;
    const size_t r = e / cols, c = e % cols;
    to[i] = from[(row0[k] + r) * static_cast<size_t>(param_cols) + col0[k] + c];
  }
}

// Adam's moments on the stack; `first` gets the (Nesterov) bias-corrected first moment, `adam`
// Adam's step; a non-finite gradient flags its block.
__global__ void moments_kernel(const float* g, float* m, float* v, float* first, float* adam,
                               size_t per, int count, float beta1, float beta2, float epsilon,
                               float inverse1, float inverse2, bool nesterov, float* flags) {
  for (size_t i : grid_stride{per * count}) {
    const float x = g[i];
    if (!isfinite(x)) flags[i / per] = 1.0f;
    const float mi = beta1 * m[i] + (1.0f - beta1) * x;
    const float vi = beta2 * v[i] + (1.0f - beta2) * x * x;
    m[i] = mi;
    v[i] = vi;
    float f = mi * inverse1;
    if (nesterov) f = beta1 * f + (1.0f - beta1) * x * inverse1;
    first[i] = f;
    adam[i] = f / (sqrtf(vi * inverse2) + epsilon);
  }
}

// Flags every block holding a non-finite value, of `a` (count blocks of per_a values) and of
// `b` (count blocks of per_b), in one launch.
__global__ void flag_nonfinite_kernel(const float* a, size_t per_a, const float* b, size_t per_b,
                                      int count, float* flags) {
  const size_t in_a = per_a * count;
  for (size_t i : grid_stride{in_a + per_b * count}) {
    const bool first = i < in_a;
    if (!isfinite(first ? a[i] : b[i - in_a])) flags[first ? i / per_a : (i - in_a) / per_b] = 1.0f;
  }
}

// Per block (one CUDA block each): w = A v was just computed; lambda = v . w (v has norm 1),
// v = w / |w|. On the first call v is all ones / sqrt(n).
__global__ void power_step_kernel(float* v, const float* w, int n, float* lambda) {
  __shared__ float dot[threads], norm[threads];
  const int k = blockIdx.x;
  const float* wk = w + static_cast<size_t>(k) * n;
  float* vk = v + static_cast<size_t>(k) * n;
  float d = 0, s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    d += vk[i] * wk[i];
    s += wk[i] * wk[i];
  }
  dot[threadIdx.x] = d;
  norm[threadIdx.x] = s;
  block_reduce(dot, sum);
  block_reduce(norm, sum);
  const float length = sqrtf(norm[0]);
  if (threadIdx.x == 0) lambda[k] = dot[0];
  for (int i = threadIdx.x; i < n; i += blockDim.x) vk[i] = length > 0 ? wk[i] / length : 0.0f;
}

// Power iteration's start: positive pseudo-random entries (as the CPU twin's), so that no
// block's top eigenvector is orthogonal to it by construction; scaled to about unit norm.
__global__ void start_vector_kernel(float* v, int n, int count) {
  for (size_t i : grid_stride{static_cast<size_t>(n) * count}) {
    uint32_t h = static_cast<uint32_t>(i % n) * 2654435761u + 12345u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    v[i] = (0.5f + static_cast<float>(h & 0xffffu) / 65536.0f) / sqrtf(static_cast<float>(n));
  }
}

// out_k = s_k I for every block (s from `scales`, or `constant` when scales is null).
__global__ void scaled_identity_kernel(float* out, int n, int count, const float* scales,
                                       float constant) {
  const size_t per = static_cast<size_t>(n) * n;
  for (size_t i : grid_stride{per * count}) {
    const size_t k = i / per, e = i % per;
    out[i] = (e / n == e % n) ? (scales ? scales[k] : constant) : 0.0f;
  }
}

// Per block: lambda = 1.01 lambda_est (as the CPU twin), damping d = eps lambda,
// z = 1 / (lambda + d); M = z (A + d I), with eigenvalues in [eps / (1 + eps), 1];
// x_scale = z^{1/p}.
__global__ void newton_start_kernel(const float* a, float* m, int n, int count, float* lambda,
                                    float* x_scale, float damping) {
  const size_t per = static_cast<size_t>(n) * n;
  for (size_t i : grid_stride{per * count}) {
    const size_t k = i / per, e = i % per;
    float lam = 1.01f * lambda[k];
    if (!(lam > 0.0f)) lam = 1.0f;
    const float d = damping * lam;
    const float z = 1.0f / (lam + d);
    m[i] = z * (a[i] + ((e / n == e % n) ? d : 0.0f));
    if (e == 0) x_scale[k] = powf(z, 1.0f / root_p);
  }
}

// t = gain (I - m / pole) (kernels/cpu/newton_steps; the classic step is ((p + 1) I - m) / p)
__global__ void newton_step_kernel(const float* m, float* t, int n, int count, float gain,
                                   float pole) {
  const size_t per = static_cast<size_t>(n) * n;
  for (size_t i : grid_stride{per * count}) {
    const size_t e = i % per;
    t[i] = gain * ((e / n == e % n) ? 1.0f : 0.0f) - (gain / pole) * m[i];
  }
}

// Per block (one CUDA block each): graft = |adam| / |p|; a non-finite p flags the block.
__global__ void graft_kernel(const float* p, const float* adam, size_t per, float* graft,
                             float* flags) {
  __shared__ float sp[threads], sa[threads];
  __shared__ int bad[threads];
  const size_t k = blockIdx.x;
  float x = 0, y = 0;
  int b = 0;
  for (size_t i = threadIdx.x; i < per; i += blockDim.x) {
    const float pv = p[k * per + i], av = adam[k * per + i];
    if (!isfinite(pv)) b = 1;
    x += pv * pv;
    y += av * av;
  }
  sp[threadIdx.x] = x;
  sa[threadIdx.x] = y;
  bad[threadIdx.x] = b;
  block_reduce(sp, sum);
  block_reduce(sa, sum);
  block_reduce(bad, [](int l, int r) { return l | r; });
  if (threadIdx.x == 0) {
    if (bad[0]) flags[k] = 1.0f;
    graft[k] = sp[0] > 0 ? sqrtf(sa[0] / sp[0]) : 0.0f;
  }
}

__global__ void update_kernel(float* theta, int param_cols, const uint32_t* row0,
                              const uint32_t* col0, int rows, int cols, int count, const float* p,
                              const float* graft, const float* flags, float lr, float decay) {
  const size_t per = static_cast<size_t>(rows) * cols;
  for (size_t i : grid_stride{per * count}) {
    const size_t k = i / per;
    if (flags[k] != 0.0f) continue;
    const size_t e = i % per;
    float& w = theta[(row0[k] + e / cols) * static_cast<size_t>(param_cols) + col0[k] + e % cols];
    w -= lr * (graft[k] * p[i] + decay * w);
  }
}

// Flagged blocks: statistics zero, roots the identity, moments zero; counted.
__global__ void reset_kernel(const float* flags, int rows, int cols, float* left, float* right,
                             float* left_root, float* right_root, float* m, float* v, int* resets) {
  const size_t k = blockIdx.x;
  if (flags[k] == 0.0f) return;
  const size_t rr = static_cast<size_t>(rows) * rows, cc = static_cast<size_t>(cols) * cols;
  const size_t rc = static_cast<size_t>(rows) * cols;
  for (size_t i = threadIdx.x; i < rr; i += blockDim.x) {
    left[k * rr + i] = 0.0f;
    left_root[k * rr + i] = (i / rows == i % rows) ? 1.0f : 0.0f;
  }
  for (size_t i = threadIdx.x; i < cc; i += blockDim.x) {
    right[k * cc + i] = 0.0f;
    right_root[k * cc + i] = (i / cols == i % cols) ? 1.0f : 0.0f;
  }
  for (size_t i = threadIdx.x; i < rc; i += blockDim.x) m[k * rc + i] = v[k * rc + i] = 0.0f;
  if (threadIdx.x == 0) atomicAdd(resets, 1);
}

// -- the workspace -----------------------------------------------------------------------------

// Where the parts of a step's workspace lie, from `base` (null: only `floats` is wanted). A
// roots-only layout (the paired roots') has no stacks of rows x cols: those parts stay null.
struct workspace_layout {
  float *g = nullptr, *first = nullptr, *adam = nullptr, *product = nullptr,
        *p = nullptr;                       // count x rows x cols each
  float *x, *t, *t2, *newton, *scratch;     // count x n x n each, n = max(rows, cols)
  float *v, *w;                             // count x n
  float *lambda, *x_scale, *graft, *flags;  // count
  size_t floats = 0;                        // the span of them all

  workspace_layout(float* base, int rows, int cols, int count, bool roots_only = false) {
    const size_t rc = static_cast<size_t>(rows) * cols * count;
    const int n = rows > cols ? rows : cols;
    const size_t nn = static_cast<size_t>(n) * n * count;
    auto take = [&](float** part, size_t size) {
      *part = base ? base + floats : nullptr;
      floats += size;
    };
    if (!roots_only)
      for (float** s : {&g, &first, &adam, &product, &p}) take(s, rc);
    for (float** s : {&x, &t, &t2, &newton, &scratch}) take(s, nn);
    take(&v, static_cast<size_t>(n) * count);
    take(&w, static_cast<size_t>(n) * count);
    for (float** s : {&lambda, &x_scale, &graft, &flags}) take(s, static_cast<size_t>(count));
  }
};

size_t layout_floats(int rows, int cols, int count, bool roots_only = false) {
  return workspace_layout{nullptr, rows, cols, count, roots_only}.floats;
}

#define TROUPE_CUDA_TRY(call)             \
  do {                                    \
    const cudaError_t err_ = (call);      \
    if (err_ != cudaSuccess) return err_; \
  } while (0)
#define TROUPE_CUBLAS_TRY(call)                                   \
  do {                                                            \
    if ((call) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown; \
  } while (0)

// The Newton steps every root of a step takes: chosen for the sure interval [damping, 1].
std::vector<polynomial_step> schedule_for(const dash_step_params& p) {
  const double sure_lo = double(p.damping) / (1.0 + double(p.damping));
  return newton_schedule(sure_lo, root_p, 3, p.newton_iterations);
}

// root = a^{-1/4} for every block of a (count x n x n) by coupled Newton, taking `schedule`.
cudaError_t inverse_root(cublasHandle_t h, cudaStream_t s, const float* a, float* root, int n,
                         int count, const dash_step_params& p,
                         const std::vector<polynomial_step>& schedule, workspace_layout& ws) {
  const size_t nn = static_cast<size_t>(n) * n;
  const size_t all = nn * count;
  // Largest eigenvalue per block by batched power iteration. (One kernel running every step,
  // a CUDA block per matrix, took twice as long on an H200 as these 100 launches: too few
  // warps to hide the latency of its loads.)
  start_vector_kernel<<<blocks_for(static_cast<size_t>(n) * count), threads, 0, s>>>(ws.v, n,
                                                                                     count);
  // At least one: the last step writes lambda, which the Newton start reads.
  for (int i = 0; i < std::max(p.power_iterations, 1); ++i) {
    TROUPE_CUBLAS_TRY(gemm_rm(h, n, 1, n, 1.0f, a, nn, ws.v, n, 0.0f, ws.w, n, count));
    power_step_kernel<<<count, threads, 0, s>>>(ws.v, ws.w, n, ws.lambda);
  }
  newton_start_kernel<<<blocks_for(all), threads, 0, s>>>(a, ws.newton, n, count, ws.lambda,
                                                          ws.x_scale, p.damping);
  scaled_identity_kernel<<<blocks_for(all), threads, 0, s>>>(ws.x, n, count, ws.x_scale, 0.0f);
  float* x = ws.x;
  float* m = ws.newton;
  float* scratch = ws.scratch;
  for (const polynomial_step& step : schedule) {
    newton_step_kernel<<<blocks_for(all), threads, 0, s>>>(
        m, ws.t, n, count, static_cast<float>(step.gain), static_cast<float>(step.pole));
    TROUPE_CUBLAS_TRY(gemm_rm(h, n, n, n, 1.0f, x, nn, ws.t, nn, 0.0f, scratch, nn, count));
    float* swap = x;
    x = scratch, scratch = swap;
    TROUPE_CUBLAS_TRY(gemm_rm(h, n, n, n, 1.0f, ws.t, nn, ws.t, nn, 0.0f, ws.t2, nn, count));
    TROUPE_CUBLAS_TRY(gemm_rm(h, n, n, n, 1.0f, ws.t2, nn, ws.t2, nn, 0.0f, ws.t, nn, count));
    TROUPE_CUBLAS_TRY(gemm_rm(h, n, n, n, 1.0f, ws.t, nn, m, nn, 0.0f, scratch, nn, count));
    swap = m;
    m = scratch, scratch = swap;
  }
  TROUPE_CUDA_TRY(cudaMemcpyAsync(root, x, all * sizeof(float), cudaMemcpyDeviceToDevice, s));
  return cudaGetLastError();
}

// Both roots of square blocks (n x n, `count` of each) as one batch of 2 x count: a batch of a
// few 256 x 256 products leaves most of the GPU idle, twice as many fill more of it. The
// statistics are stacked in the step's own squares (`own`, which only its roots would use),
// rooted there with a roots-only layout behind the step's and copied out.
cudaError_t paired_roots(cublasHandle_t h, cudaStream_t s, const dash_group_buffers& g,
                         const dash_step_params& p, const std::vector<polynomial_step>& schedule,
                         const workspace_layout& own) {
  const int n = g.rows, count = g.count;
  const size_t half = static_cast<size_t>(n) * n * count, bytes = half * sizeof(float);
  float* stack = own.x;  // x to scratch: 5 x half floats in a row
  workspace_layout ws{g.workspace + own.floats, n, n, 2 * count, true};
  TROUPE_CUDA_TRY(cudaMemcpyAsync(stack, g.left, bytes, cudaMemcpyDeviceToDevice, s));
  TROUPE_CUDA_TRY(cudaMemcpyAsync(stack + half, g.right, bytes, cudaMemcpyDeviceToDevice, s));
  // The stack is read only before the first Newton step: it takes the roots too.
  TROUPE_CUDA_TRY(inverse_root(h, s, stack, stack, n, 2 * count, p, schedule, ws));
  TROUPE_CUDA_TRY(cudaMemcpyAsync(g.left_root, stack, bytes, cudaMemcpyDeviceToDevice, s));
  TROUPE_CUDA_TRY(cudaMemcpyAsync(g.right_root, stack + half, bytes, cudaMemcpyDeviceToDevice, s));
  return cudaGetLastError();
}

}  // namespace

size_t dash_workspace_floats(int rows, int cols, int count) {
  const size_t own = layout_floats(rows, cols, count);
  // Square blocks take both roots in one batch (paired_roots): a roots-only layout behind.
  return rows != cols ? own : own + layout_floats(rows, rows, 2 * count, true);
}

cudaError_t batched_inverse_root(cublasHandle_t h, cudaStream_t s, const float* a, float* root,
                                 int n, int count, const dash_step_params& p, float* workspace) {
  if (count == 0) return cudaSuccess;
  TROUPE_CUBLAS_TRY(cublasSetStream(h, s));
  workspace_layout ws{workspace, n, n, count};
  return inverse_root(h, s, a, root, n, count, p, schedule_for(p), ws);
}

cudaError_t dash_group_init(const dash_group_buffers& g, cudaStream_t stream) {
  const size_t ll = static_cast<size_t>(g.rows) * g.rows * g.count;
  const size_t rr = static_cast<size_t>(g.cols) * g.cols * g.count;
  scaled_identity_kernel<<<blocks_for(ll), threads, 0, stream>>>(g.left_root, g.rows, g.count,
                                                                 nullptr, 1.0f);
  scaled_identity_kernel<<<blocks_for(rr), threads, 0, stream>>>(g.right_root, g.cols, g.count,
                                                                 nullptr, 1.0f);
  return cudaGetLastError();
}

cudaError_t dash_group_step(cublasHandle_t h, cudaStream_t s, float* theta, const float* grad,
                            int param_cols, const dash_group_buffers& g,
                            const dash_step_params& p) {
  if (g.count == 0) return cudaSuccess;
  TROUPE_CUBLAS_TRY(cublasSetStream(h, s));
  workspace_layout ws{g.workspace, g.rows, g.cols, g.count};
  const int r = g.rows, c = g.cols, count = g.count;
  const size_t rc = static_cast<size_t>(r) * c, all = rc * count;
  const long long rr = static_cast<long long>(r) * r, cc = static_cast<long long>(c) * c;
  gather_kernel<<<blocks_for(all), threads, 0, s>>>(grad, param_cols, g.row0, g.col0, r, c, count,
                                                    ws.g, ws.flags);
  // Statistics: L = beta L + (1 - beta) G G^T, R = beta R + (1 - beta) G^T G. cuBLAS reads the
  // row-major r x c G as a column-major c x r matrix, G^T: op T of it is G, op N is G^T.
  const float w = 1.0f - p.beta;
  TROUPE_CUBLAS_TRY(cublasSgemmStridedBatched(
      h, CUBLAS_OP_T, CUBLAS_OP_N, r, r, c, &w, ws.g, c, static_cast<long long>(rc), ws.g, c,
      static_cast<long long>(rc), &p.beta, g.left, r, rr, count));
  TROUPE_CUBLAS_TRY(cublasSgemmStridedBatched(
      h, CUBLAS_OP_N, CUBLAS_OP_T, c, c, r, &w, ws.g, c, static_cast<long long>(rc), ws.g, c,
      static_cast<long long>(rc), &p.beta, g.right, c, cc, count));
  flag_nonfinite_kernel<<<blocks_for((rr + cc) * count), threads, 0, s>>>(g.left, rr, g.right, cc,
                                                                          count, ws.flags);
  if (p.compute_roots) {
    const auto schedule = schedule_for(p);  // the same for L and R
    if (r == c) {
      TROUPE_CUDA_TRY(paired_roots(h, s, g, p, schedule, ws));
    } else {
      TROUPE_CUDA_TRY(inverse_root(h, s, g.left, g.left_root, r, count, p, schedule, ws));
      TROUPE_CUDA_TRY(inverse_root(h, s, g.right, g.right_root, c, count, p, schedule, ws));
    }
    flag_nonfinite_kernel<<<blocks_for((rr + cc) * count), threads, 0, s>>>(
        g.left_root, rr, g.right_root, cc, count, ws.flags);
  }
  const double t = static_cast<double>(p.step > 0 ? p.step : 1);
  const auto inverse1 = static_cast<float>(1.0 / (1.0 - std::pow(double{p.beta1}, t)));
  const auto inverse2 = static_cast<float>(1.0 / (1.0 - std::pow(double{p.beta2}, t)));
  moments_kernel<<<blocks_for(all), threads, 0, s>>>(ws.g, g.m, g.v, ws.first, ws.adam, rc, count,
                                                     p.beta1, p.beta2, p.epsilon, inverse1,
                                                     inverse2, p.nesterov, ws.flags);
  // D = L^{-1/4} M R^{-1/4}, grafted to Adam's norm block by block.
  TROUPE_CUBLAS_TRY(gemm_rm(h, r, c, r, 1.0f, g.left_root, rr, ws.first, static_cast<long long>(rc),
                            0.0f, ws.product, static_cast<long long>(rc), count));
  TROUPE_CUBLAS_TRY(gemm_rm(h, r, c, c, 1.0f, ws.product, static_cast<long long>(rc), g.right_root,
                            cc, 0.0f, ws.p, static_cast<long long>(rc), count));
  graft_kernel<<<count, threads, 0, s>>>(ws.p, ws.adam, rc, ws.graft, ws.flags);
  update_kernel<<<blocks_for(all), threads, 0, s>>>(theta, param_cols, g.row0, g.col0, r, c, count,
                                                    ws.p, ws.graft, ws.flags, p.lr, p.weight_decay);
  reset_kernel<<<count, threads, 0, s>>>(ws.flags, r, c, g.left, g.right, g.left_root, g.right_root,
                                         g.m, g.v, g.resets);
  return cudaGetLastError();
}

}  // namespace troupe::kernels::cuda
