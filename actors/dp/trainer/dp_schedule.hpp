// The arithmetic of a data-parallel job, as pure functions: which examples each member
// computes at each step, how the gradient is cut into buckets in backward order, and the
// parameter checksum the members compare. Every member computes the same answers from the
// same inputs; nothing here holds state.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "troupe/detail/layout.hpp"

namespace troupe {

// Optimizer steps in one epoch of `examples` examples, `global_batch` per step (the last
// step may be smaller).
uint64_t dp_steps_per_epoch(uint64_t examples, uint32_t global_batch);

// Examples first .. first + count - 1 of an epoch's order: member `rank` of `members`'s
// share of step `step` (0-based within the epoch). The step's examples are split as evenly as
// possible, in rank order, so that every example of the epoch is computed exactly once.
struct example_range {
  uint64_t first = 0;
  uint32_t count = 0;
};
example_range dp_share(uint64_t examples, uint32_t global_batch, uint64_t step, uint32_t members,
                       uint32_t rank);

// As dp_share, but the step's examples are split in proportion to `weights` (one per member,
// each > 0: the members' measured examples per second, --balance). Members that pass the same
// weights get shares that cover the step exactly once.
example_range dp_weighted_share(uint64_t examples, uint32_t global_batch, uint64_t step,
                                const std::vector<double>& weights, uint32_t rank);

// The `parts` micro-batches (--accumulate) of `count` examples: their sizes, as even as
// possible, the larger first; those of size 0 are left out.
std::vector<uint32_t> micro_batches(uint32_t count, uint32_t parts);

// A run of the flat gradient reduced in one collective: values [begin, end), which overlap
// `tensors` tensors (a bucket may be sent once all of them are final).
struct gradient_bucket {
  uint64_t begin = 0;
  uint64_t end = 0;
  std::vector<size_t> tensors;
  bool full_precision = false;  // its tensors are kept at fp32 (--compress-skip)
};

// Cuts the layout's values into buckets of at most `cap_bytes` in reverse tensor order (last
// tensor first, as backward finishes them), the first bucket at most min(1 MiB, cap_bytes),
// as DDP does. Tensors stay whole in one bucket when they fit (so that a bucket does not wait
// for a tensor that backward finishes much later); a tensor larger than a bucket is split
// across buckets of its own. Buckets come in the order they are reduced; together they
// cover every value once. A bucket holds only tensors that `full_precision` marks (by
// index; empty: none), or only others.
std::vector<gradient_bucket> plan_gradient_buckets(const flat_layout& layout, uint64_t cap_bytes,
                                                   const std::vector<bool>& full_precision = {});

// FNV-1a over the bytes of `values`: replicas that applied the same steps agree bit for bit.
uint64_t parameter_checksum(std::span<const float> values);

}  // namespace troupe
