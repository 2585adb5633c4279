// What every CUDA kernel file here shares: the block size, the grid for n elements, the
// grid-stride loop, and the tree reduction of one value per thread in shared memory. For
// kernels/cuda/*.cu only (device code, C++17).
#pragma once

#include <cstddef>

namespace troupe::kernels::cuda {

constexpr int threads = 256;  // per block; a power of two (block_reduce needs it)

// Blocks for one thread per element of `n` (a grid-stride loop covers the rest), at most `cap`.
inline int blocks_for(size_t n, size_t cap = 65535) {
  const size_t wanted = (n + threads - 1) / threads;
  return static_cast<int>(wanted < cap ? wanted : cap);
}

// for (size_t i : grid_stride(n)) visits this thread's elements of [0, n) across the grid.
struct grid_stride {
  size_t n;
  struct iterator {
    size_t i, step;
    __device__ size_t operator*() const { return i; }
    __device__ iterator& operator++() {
      i += step;
      return *this;
    }
    __device__ bool operator!=(const iterator& end) const { return i < end.i; }
  };
  __device__ iterator begin() const {
    return {blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x,
            static_cast<size_t>(gridDim.x) * blockDim.x};
  }
  __device__ iterator end() const { return {n, 0}; }
};

// Folds shared[0 .. blockDim.x) into shared[0] with `op` (a tree: the same order every run).
// Every thread of the block calls it, after writing its own shared[threadIdx.x].
template <class T, class Op>
__device__ void block_reduce(T* shared, Op op) {
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
}

}  // namespace troupe::kernels::cuda
