// One DASH step of one 2-D parameter, packed for a device: the parameter, its gradient, Adam's
// moments and every group's statistics and roots in one fp32 array, so that a GPU step is one
// upload, one run of the group steps (kernels/cuda/dash.hpp) and one download. The host keeps
// the state (a dash_matrix and the caller's moments): a packed step is a copy that comes back,
// and unpacking writes it home. Moments are stacked per block, as the CUDA step wants them,
// not in the parameter's layout. Called by a parameter bucket (pack, unpack) and by the GPU
// side (actors/gpu/dash_device) that reads the layout; plain C++, no CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/dash.hpp"
#include "kernels/status.hpp"

namespace troupe::kernels {

// Where one group's tensors start in the packed array (offsets in floats, each aligned to 64).
// row0 and col0 hold uint32 and resets an int32, stored bit for bit in float slots.
struct packed_group {
  uint32_t rows = 0, cols = 0, count = 0;
  size_t row0 = 0, col0 = 0, left = 0, right = 0, left_root = 0, right_root = 0;
  size_t m = 0, v = 0, resets = 0;
};

// What the device needs besides the values: the hyperparameters of this step.
struct packed_hyper {
  float lr = 0, beta = 0, beta1 = 0, beta2 = 0, epsilon = 0, weight_decay = 0, damping = 0;
  bool nesterov = false;
  uint64_t step = 1;
  bool compute_roots = false;
};

struct packed_dash_step {
  uint32_t rows = 0, cols = 0;
  size_t theta = 0, grad = 0;  // offsets of the parameter and the gradient
  std::vector<packed_group> groups;
  packed_hyper hyper;
  std::shared_ptr<std::vector<float>> values;  // everything above, packed
};

// Whether the GPU step computes what `config` asks for: coupled-Newton roots scaled by power
// iteration (the CUDA step has no other solver or scaling). 16-bit statistics stay so on the
// host: the device gets and returns them in fp32, and unpacking rounds them as the CPU step
// does, which also computes the roots from the fp32 update, with the damping raised as there
// (packed_hyper::damping).
bool gpu_can_step(const dash_config& config);

// The floats one packed step of `dash` takes (its parameter, gradient, moments and state).
size_t packed_floats(const dash_matrix& dash);

// The largest package a GPU route takes (copies go through pinned staging pages of bounded
// size); bigger parameters step on the CPU.
constexpr size_t max_packed_bytes = size_t{512} << 20;

// Packs one step of `dash` on theta with grad and the moments m, v (all rows x cols,
// row-major); `step` counts from 1, `lr` is this step's learning rate. `reuse`, when nobody
// else holds it and it has the room, becomes the package's values (every field is written; the
// gaps between them keep what they held): it spares a fresh array's page faults.
packed_dash_step pack_dash_step(const dash_matrix& dash, std::span<const float> theta,
                                std::span<const float> grad, std::span<const float> m,
                                std::span<const float> v, uint64_t step, float lr,
                                std::shared_ptr<std::vector<float>> reuse = nullptr);

// Writes a stepped package back: the parameter, the moments and the statistics and roots.
// Returns the blocks the device reset, or errc::shape_mismatch or non_finite (nothing
// written) when the package does not fit `dash` or what would be written is not finite.
result<uint32_t> unpack_dash_step(const packed_dash_step& done, dash_matrix& dash,
                                  std::span<float> theta, std::span<float> m, std::span<float> v);

}  // namespace troupe::kernels
