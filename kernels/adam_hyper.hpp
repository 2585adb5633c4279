// Adam's hyper-parameters, shared by the CPU reference and the CUDA kernel (C++17-clean, so
// that .cu files can include it).
#pragma once

#include <cstdint>

namespace troupe::kernels {

struct adam_hyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;  // decoupled (AdamW) when > 0
  uint64_t step = 1;          // 1-based count of updates including this one (bias correction)
  float l2 = 0.0f;            // coupled L2 (Adam's weight decay): g <- g + l2 theta first
};

}  // namespace troupe::kernels
