#include <cuda_runtime.h>

#include "kernels/cuda/device.hpp"

namespace troupe::kernels::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls are not poisoned
    return 0;
  }
  return count;
}

}  // namespace troupe::kernels::cuda
