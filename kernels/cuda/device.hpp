// What the CUDA runtime can see. Any error from the driver or runtime (no driver, no device,
// a container without /dev/nvidia*) counts as "no GPU": callers then take the CPU path.
#pragma once

namespace troupe::kernels::cuda {

// Number of usable CUDA devices; 0 on any error.
int device_count();

}  // namespace troupe::kernels::cuda
