// The state and steps of one data-parallel member under 1-bit or 0/1 Adam
// (actors/dp/compression/compressed_adam.hpp): what it sends in each stage and how it applies what
// comes back. The parameters and both moments stay in the trainer's one-bucket bucket_store (so
// that checkpoints and a new generation's state agreement carry them, as for every
// optimizer); the flat ranges the trainer hands in are mapped onto its slices. 0/1 Adam adds
// the parameters at the last synchronisation and the update accumulated since. Owned by one
// dp_trainer; not thread-safe.
#pragma once

#include <span>
#include <vector>

#include "actors/bucket/bucket_store.hpp"
#include "actors/dp/compression/compressed_adam.hpp"
#include "troupe/detail/layout.hpp"

namespace troupe {

class adam_replica {
 public:
  // `plan`: the store's one bucket, every tensor a whole slice of it.
  adam_replica(const flat_layout& layout, const bucket_placement& plan, dp_compression compression,
               optimizer_config o);

  // A new generation, a restored state or 0/1 Adam's variance freeze: the members go on from
  // `store`'s parameters with nothing accumulated.
  void restart(bucket_store& store);

  // Before member's weighted gradient values [begin, begin + values.size()) of the flat
  // layout are summed in `stage`: adds weight * wd * theta, and in the momentum stage turns
  // them into weight * b1 * m + (1 - b1) * values (their sum is the new momentum).
  void prepare(adam_stage stage, std::span<float> values, uint64_t begin, float weight,
               bucket_store& store) const;

  // The summed values of a full or momentum step `step` (1-based); refuses non-finite ones
  // (errc::non_finite) before changing anything.
  caf::error apply(adam_stage stage, uint64_t step, std::span<const float> summed,
                   bucket_store& store);

  // 0/1 Adam's local step with this member's own mean gradient (errc::non_finite: skipped).
  // It adds to the accumulated update; `in_place`: it also steps the parameters and momentum
  // (not in a sync step, whose mean replaces both).
  caf::error local_step(uint64_t step, std::span<const float> grad, bucket_store& store,
                        bool in_place);

  // A synchronisation: `out` becomes weight * the update accumulated since the last one
  // (the sum over the members is their mean); adopt() takes that sum. A sum that is not
  // finite puts every member back at the last synchronisation with no momentum
  // (errc::non_finite).
  void accumulated(std::span<float> out, float weight) const;
  caf::error adopt(uint64_t step, std::span<const float> mean, bucket_store& store);

 private:
  // Calls fn(slice, offset in it, flat index, count) for the slices under [begin, end).
  template <class Fn>
  void for_pieces(uint64_t begin, uint64_t end, Fn fn) const;
  adam_corrections corrections(uint64_t step) const;

  const flat_layout& layout_;
  std::vector<size_t> slice_of_;  // per tensor: its slice in the store
  dp_compression compression_;
  optimizer_config optimizer_;
  std::vector<float> anchor_;       // 0/1 Adam: the parameters at the last synchronisation
  std::vector<float> accumulated_;  // 0/1 Adam: sum of lr * m / cm since then
  double lr_sum_ = 0;
  std::vector<float> g_scratch_, theta_scratch_, m_scratch_;  // local_step's, reused
};

}  // namespace troupe
