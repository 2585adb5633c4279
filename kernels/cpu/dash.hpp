// DASH (Modoranu et al. 2026): block-diagonal Shampoo for one 2-D parameter on the CPU. The
// rows x cols matrix is cut into B x B blocks (the last row and column of blocks may be
// smaller); blocks of the same shape are stacked into one group, so that each group's
// statistics, roots and GEMMs are batched tensors (the layout the CUDA twin uses with
// strided-batched GEMMs). Per block, per step:
//   L <- beta L + (1 - beta) G G^T,   R <- beta R + (1 - beta) G^T G        (fp32 accumulation)
//   every `frequency` steps: L^{-1/4}, R^{-1/4} by the chosen solver (kernels/cpu/inverse_root)
//   D = L^{-1/4} M R^{-1/4}, M Adam's bias-corrected first moment (Nesterov: its look-ahead)
//   grafting: D is scaled to the norm of Adam's step on the block
//   theta <- theta - lr (D + weight_decay theta)
// L and R may be stored in bf16 or fp16, each block scaled by its largest magnitude and rounded
// stochastically (unbiased), with the damping raised to the format's resolution. A block
// whose gradient, statistics or roots are not finite is reset (statistics zero, roots the
// identity, moments zero), its parameters are left as they were, and it is counted. Not
// thread-safe: one owner (a parameter bucket, a worker, a benchmark); with config.threads > 1
// a step spreads its blocks over that many threads of its own and returns when all are done.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/adam_hyper.hpp"
#include "kernels/cpu/inverse_root.hpp"

namespace troupe::kernels {

using troupe::dash_storage;  // troupe/values.hpp

struct dash_config {
  uint32_t block = 128;     // B
  uint32_t frequency = 10;  // roots every this many steps (and at the first)
  float beta = 0.999f;      // decay of the statistics L and R
  root_options roots;       // solver, scaling, damping
  adam_hyper adam;          // lr, moments, epsilon, weight decay (its step is set per call)
  bool nesterov = false;    // precondition the look-ahead moment
  dash_storage storage = dash_storage::fp32;
  // Threads that step the blocks (each its own blocks, whose results do not depend on it).
  // More than one pays when BLAS runs one thread per call (the owner's setting,
  // troupe::set_blas_threads); otherwise the two kinds of threads contend.
  uint32_t threads = 1;
};

// Blocks of one shape, stacked: block k's L is left[k * rows * rows ...], its R
// right[k * cols * cols ...], its origin (row0[k], col0[k]) in the parameter.
struct dash_group {
  uint32_t rows = 0, cols = 0;
  std::vector<uint32_t> row0, col0;
  std::vector<float> left, right;              // statistics, fp32 storage
  std::vector<uint16_t> left16, right16;       // statistics, 16-bit storage
  std::vector<float> left_scale, right_scale;  // per block, with 16-bit storage
  std::vector<float> left_root, right_root;    // L^{-1/4}, R^{-1/4} (fp32)

  size_t size() const { return row0.size(); }
};

// The damping the roots use: the configured one, raised for 16-bit statistics to the format's
// resolution (1/128 for bf16, 1/1024 for fp16): below it they hold only rounding noise.
float effective_damping(const dash_config& config);

class dash_matrix {
 public:
  dash_matrix(uint32_t rows, uint32_t cols, dash_config config);

  // One update of theta (rows x cols, row-major) with grad; m and v are Adam's moments (the
  // caller's, as for adam_step), `step` counts from 1 and `lr` is this step's learning rate.
  // Returns the blocks reset this step (non-finite gradient, statistics or roots).
  uint32_t step(std::span<float> theta, std::span<const float> grad, std::span<float> m,
                std::span<float> v, uint64_t step, float lr);

  // The saved state, for checkpoints and backups: four tensors per group (L, R, L^{-1/4},
  // R^{-1/4}, each its blocks stacked, in fp32). set_state writes whole blocks from block
  // `first` on; errc::shape_mismatch when they do not fit.
  size_t state_count() const { return groups_.size() * 4; }
  size_t block_values(size_t state) const;  // values per block of state tensor `state`
  std::vector<float> state(size_t index) const;
  status set_state(size_t index, size_t first, std::span<const float> values);

  uint32_t rows() const { return rows_; }
  uint32_t cols() const { return cols_; }
  size_t blocks() const;
  uint64_t resets() const { return resets_; }
  double gemm_flops() const { return gemm_flops_; }  // matrix-multiply FLOPs so far
  const std::vector<dash_group>& groups() const { return groups_; }
  const dash_config& config() const { return config_; }
  // The step whose seed the stochastic rounding of 16-bit statistics uses: step() sets it;
  // a step done elsewhere (a GPU, kernels/cpu/dash_pack) sets it before writing back.
  void set_rounding_step(uint64_t step) { rounding_step_ = step; }
  // A block's statistics in fp32, whatever the storage (for checkpoints and tests).
  std::vector<float> left_of(size_t group, size_t k) const;
  std::vector<float> right_of(size_t group, size_t k) const;

 private:
  struct scratch;
  struct moments {
    std::span<float> m, v;
  };
  bool step_block(dash_group& g, size_t k, std::span<float> theta, std::span<const float> grad,
                  moments mv, uint64_t step, float lr, scratch& s, double& flops);
  void reset_block(dash_group& g, size_t k, moments mv);
  void load(const dash_group& g, size_t k, bool left, std::vector<float>& out) const;
  void store(dash_group& g, size_t k, bool left, std::span<const float> values);

  uint32_t rows_, cols_;
  dash_config config_;
  std::vector<dash_group> groups_;
  uint64_t resets_ = 0;
  double gemm_flops_ = 0;
  uint64_t rounding_step_ = 0;  // seeds the stochastic rounding of 16-bit statistics
};

}  // namespace troupe::kernels
