// troupe-bench dash-gpu (built with CUDA only): DASH on the GPU, on the shapes of the CPU
// suite (a 1024 x 1024 parameter, B = 256: 16 blocks, 32 roots). Rows:
//   - the roots of 32 stacked 256 x 256 blocks by the batched Newton schedule and by cuSOLVER's
//     eigendecomposition (one syevd per block, as Distributed Shampoo does), the figure DASH's
//     speed-up is about; the Newton row's limit is its GEMM FLOPs at the cuBLAS sgemm rate;
//   - the whole group step with the roots every step (f = 1) and every tenth (f = 10);
//   - Adam's CUDA step on the same tensor;
//   - a bucket's DASH step through the GPU route (--dash-device gpu: pack, upload, group
//     steps, download, unpack) and on the CPU (dash_route_bench.cpp);
//   - one large cuBLAS sgemm: the rate behind the limits.
// Without a usable GPU the suite says so and prints nothing else.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <fmt/format.h>

#include <limits>
#include <memory>

#include "apps/bench/suites.hpp"
#include "kernels/cpu/newton_steps.hpp"
#include "kernels/cuda/adam.hpp"
#include "kernels/cuda/dash.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/eigen_root.hpp"

namespace troupe::bench {

namespace {

using namespace troupe::kernels;

// count values of T on the device, zeroed or copied from `host`; a failure (ptr null) is
// also written to `failed`, which every user checks before enqueuing.
template <class T>
struct device_buffer {
  T* ptr = nullptr;
  device_buffer(size_t count, cudaError_t& failed, const std::vector<T>* host = nullptr) {
    const size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
    cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err == cudaSuccess) err = cudaMemset(ptr, 0, bytes);
    if (err == cudaSuccess && host)
      err = cudaMemcpy(ptr, host->data(), std::min(count, host->size()) * sizeof(T),
                       cudaMemcpyHostToDevice);
    if (err != cudaSuccess) {
      cudaFree(ptr);
      ptr = nullptr;
      if (failed == cudaSuccess) failed = err;
    }
  }
  ~device_buffer() { cudaFree(ptr); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

// Times `enqueue` (work on the stream) until the stream is done; a failed enqueue stops it.
timing time_on_gpu(int reps, cudaStream_t stream, const std::function<cudaError_t()>& enqueue,
                   cudaError_t& failed) {
  return measure(1, reps, [&] {
    if (failed != cudaSuccess) return;
    failed = enqueue();
    if (failed == cudaSuccess) failed = cudaStreamSynchronize(stream);
  });
}

double sgemm_rate(cublasHandle_t blas, cudaStream_t stream, int reps, cudaError_t& failed) {
  const int n = 8192;
  const auto values = random_values(size_t{n} * n, 1);  // not zeros: those run cooler
  device_buffer<float> a(values.size(), failed, &values), b(values.size(), failed, &values),
      c(values.size(), failed);
  const float one = 1.0f, zero = 0.0f;
  const timing t = time_on_gpu(
      reps, stream,
      [&] {
        return cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.ptr, n, b.ptr, n, &zero,
                           c.ptr, n) == CUBLAS_STATUS_SUCCESS
                   ? cudaSuccess
                   : cudaErrorUnknown;
      },
      failed);
  return 2.0 * n * n * double(n) / t.median_s;
}

row ms_row(std::string name, const timing& t, double limit_ms = 0, std::string limit_name = {}) {
  return row{std::move(name), "ms",     1e3 * t.median_s,     1e3 * t.min_s,
             1e3 * t.max_s,   limit_ms, std::move(limit_name)};
}

// The GEMM FLOPs of `count` coupled-Newton inverse roots of n x n blocks: four products per
// Newton step, and the power iteration's products with a vector.
double root_flops(int n, int count, const cuda::dash_step_params& p) {
  const double steps =
      double(newton_schedule(p.damping / (1.0 + p.damping), 4, 3, p.newton_iterations).size());
  return count * (steps * 4.0 * 2.0 * double(n) * n * n + p.power_iterations * 2.0 * double(n) * n);
}

// The roots of `count` stacked SPD blocks (G G^T / n + 1e-3 I) both ways.
std::vector<row> time_roots(cublasHandle_t blas, cusolverDnHandle_t solver, cudaStream_t stream,
                            int n, int count, int reps, double rate, cudaError_t& failed) {
  const size_t nn = size_t(n) * n;
  std::vector<float> a(nn * count);
  const auto g = random_values(nn * count, 11);
  for (int k = 0; k < count; ++k)  // on the host once; the figures are the GPU's
    for (int r = 0; r < n; ++r)
      for (int c = 0; c <= r; ++c) {
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += double(g[k * nn + r * n + j]) * g[k * nn + c * n + j];
        a[k * nn + r * n + c] = a[k * nn + c * n + r] =
            static_cast<float>(sum / n + (r == c ? 1e-3 : 0.0));
      }
  device_buffer<float> d_a(a.size(), failed, &a), root(a.size(), failed);
  device_buffer<float> newton_work(cuda::dash_workspace_floats(n, n, count), failed);
  const size_t eigen_floats =
      d_a.ptr ? cuda::eigen_root_workspace_floats(solver, d_a.ptr, n, count) : 0;
  if (eigen_floats == 0 && failed == cudaSuccess) failed = cudaErrorUnknown;  // no syevd size
  device_buffer<float> eigen_work(eigen_floats, failed);
  device_buffer<int> info(count, failed);
  cuda::dash_step_params p;
  const timing newton = time_on_gpu(
      reps, stream,
      [&] {
        return cuda::batched_inverse_root(blas, stream, d_a.ptr, root.ptr, n, count, p,
                                          newton_work.ptr);
      },
      failed);
  const timing eigen = time_on_gpu(
      reps, stream,
      [&] {
        return cuda::eigen_inverse_root(solver, blas, stream, d_a.ptr, root.ptr, n, count,
                                        p.damping, eigen_work.ptr, info.ptr);
      },
      failed);
  std::vector<int> status(count, 0);
  if (failed == cudaSuccess)
    failed = cudaMemcpy(status.data(), info.ptr, count * sizeof(int), cudaMemcpyDeviceToHost);
  for (int s : status)
    if (s != 0 && failed == cudaSuccess) failed = cudaErrorUnknown;  // a syevd that failed
  return {ms_row(fmt::format("roots newton {}x{}^2", count, n), newton,
                 1e3 * root_flops(n, count, p) / rate, "its GEMM FLOPs at sgemm rate"),
          ms_row(fmt::format("roots evd (cusolver) {}x{}^2", count, n), eigen),
          row{"roots: evd time / newton time", "x", eigen.median_s / newton.median_s,
              eigen.min_s / newton.max_s, eigen.max_s / newton.min_s}};
}

// The group step on an n x n parameter in B x B blocks (one group; n a multiple of B), eight
// gradients in turn, with the roots every step and every tenth; Adam's step beside it. A step's
// limit is its GEMM FLOPs at `rate`: the statistics (G G^T, G^T G) and the preconditioned
// gradient (two products) of every block, and at a root step both roots of every block.
std::vector<row> time_group_steps(cublasHandle_t blas, cudaStream_t stream, size_t n_values,
                                  int block, int reps, double rate, cudaError_t& failed) {
  const int n = static_cast<int>(n_values) / block * block;
  const int per_side = n / block, count = per_side * per_side;
  const size_t values = size_t(n) * n, blocks_values = size_t(block) * block * count;
  std::vector<uint32_t> row0, col0;
  for (int i = 0; i < per_side; ++i)
    for (int j = 0; j < per_side; ++j) row0.push_back(i * block), col0.push_back(j * block);
  const auto theta_host = random_values(values, 3);
  device_buffer<float> theta(values, failed, &theta_host), m(values, failed), v(values, failed);
  std::vector<std::unique_ptr<device_buffer<float>>> grads;
  for (uint64_t k = 0; k < 8; ++k) {
    const auto g = random_values(values, 4 + k, 1e-2f);
    grads.push_back(std::make_unique<device_buffer<float>>(values, failed, &g));
  }
  device_buffer<uint32_t> d_row0(row0.size(), failed, &row0), d_col0(col0.size(), failed, &col0);
  device_buffer<float> left(blocks_values, failed), right(blocks_values, failed),
      left_root(blocks_values, failed), right_root(blocks_values, failed),
      bm(blocks_values, failed), bv(blocks_values, failed),
      work(cuda::dash_workspace_floats(block, block, count), failed);
  device_buffer<int> resets(1, failed);
  cuda::dash_group_buffers g{block,    block,     count,         d_row0.ptr,     d_col0.ptr,
                             left.ptr, right.ptr, left_root.ptr, right_root.ptr, bm.ptr,
                             bv.ptr,   work.ptr,  resets.ptr};
  if (failed == cudaSuccess) failed = cuda::dash_group_init(g, stream);
  uint64_t step = 0;
  auto steps = [&](int how_many, uint32_t frequency) {
    for (int i = 0; i < how_many; ++i, ++step) {
      cuda::dash_step_params p;
      p.step = step + 1;
      p.compute_roots = step % frequency == 0;
      const cudaError_t err =
          cuda::dash_group_step(blas, stream, theta.ptr, grads[step % 8]->ptr, n, g, p);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  };
  const timing every = time_on_gpu(
      reps, stream, [&] { return steps(1, 1); }, failed);
  step = 0;
  const timing tenth = time_on_gpu(
      reps, stream, [&] { return steps(10, 10); }, failed);
  step = 1;  // past the first step: no roots from here
  const timing rootless = time_on_gpu(
      reps, stream, [&] { return steps(10, std::numeric_limits<uint32_t>::max()); }, failed);
  const timing adam = time_on_gpu(
      reps, stream,
      [&] {
        return cuda::adam_step(theta.ptr, m.ptr, v.ptr, grads[0]->ptr, values,
                               {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1}, stream);
      },
      failed);
  const std::string shape = fmt::format("{}^2 B={}", n, block);
  const double products = count * 4.0 * 2.0 * double(block) * block * block;
  const double roots = root_flops(block, 2 * count, cuda::dash_step_params{});
  const std::string limit_name = "its GEMM FLOPs at sgemm rate";
  return {ms_row(fmt::format("dash step f=1 {}", shape), every, 1e3 * (products + roots) / rate,
                 limit_name),
          ms_row(fmt::format("dash step f=10 {} (per step)", shape),
                 timing{tenth.median_s / 10, tenth.min_s / 10, tenth.max_s / 10},
                 1e3 * (products + roots / 10) / rate, limit_name),
          ms_row(fmt::format("dash step without roots {} (per step)", shape),
                 timing{rootless.median_s / 10, rootless.min_s / 10, rootless.max_s / 10},
                 1e3 * products / rate, limit_name),
          ms_row(fmt::format("adam step {} values", values), adam)};
}

}  // namespace

suite_result run_dash_gpu(const options& o) {
  suite_result result{"dash-gpu", {}};
  if (kernels::cuda::device_count() == 0) {
    fmt::print(stderr, "troupe-bench dash-gpu: no usable CUDA device\n");
    return result;
  }
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  cudaError_t failed = cudaStreamCreate(&stream);
  if (failed == cudaSuccess && (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS ||
                                cublasSetStream(blas, stream) != CUBLAS_STATUS_SUCCESS ||
                                cusolverDnCreate(&solver) != CUSOLVER_STATUS_SUCCESS ||
                                cusolverDnSetStream(solver, stream) != CUSOLVER_STATUS_SUCCESS))
    failed = cudaErrorUnknown;
  const int reps = std::max(3, o.reps);
  const double rate = failed == cudaSuccess ? sgemm_rate(blas, stream, reps, failed) : 0.0;
  if (failed == cudaSuccess)
    for (auto& r : time_roots(blas, solver, stream, 256, 32, reps, rate, failed))
      result.rows.push_back(r);
  if (failed == cudaSuccess)
    for (auto& r : time_group_steps(blas, stream, o.size ? o.size : 1024, 256, reps, rate, failed))
      result.rows.push_back(r);
  if (failed == cudaSuccess)
    for (auto& r : time_bucket_route(static_cast<uint32_t>(o.size ? o.size : 1024), reps))
      result.rows.push_back(r);
  result.rows.push_back(row{"cuBLAS sgemm 8192^3 (the limit's rate)", "TFLOP/s", rate / 1e12,
                            rate / 1e12, rate / 1e12});
  if (failed != cudaSuccess) {
    fmt::print(stderr, "troupe-bench dash-gpu: CUDA failed: {}\n", cudaGetErrorString(failed));
    result.rows.clear();
  }
  if (solver) cusolverDnDestroy(solver);
  if (blas) cublasDestroy(blas);
  if (stream) cudaStreamDestroy(stream);
  return result;
}

}  // namespace troupe::bench
