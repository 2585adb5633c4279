// batch_record: the batches a bucket has counted (applied, rejected or skipped), so that it
// applies each at most once whichever worker pushes it. A worker that dies after pushing a
// chunk but before reporting it done has that chunk handed to another worker, whose push of it
// must not be applied a second time. Kept per epoch as merged ranges of batch indices: chunks
// finish in about the order they are handed out, so a bucket holds a few ranges per epoch.
// Saved with the bucket's counters (checkpoints, new backups). Owned by bucket_store; not
// thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "troupe/values.hpp"

namespace troupe {

class batch_record {
 public:
  // Whether any batch of `batches` was counted here.
  bool overlaps(const batch_range& batches) const;

  // Counts `batches` (count > 0), merging it with the ranges it touches.
  void add(const batch_range& batches);

  // The merged ranges, by epoch and first batch; and the record rebuilt from them.
  std::vector<batch_range> ranges() const;
  static batch_record from(const std::vector<batch_range>& ranges);

  // The bytes the record holds as saved (16 per range).
  uint64_t saved_bytes() const;

 private:
  static constexpr uint32_t max_epochs_ahead = 4096;
  // The end of epoch e's record when it is exactly the batches [0, end); 0 otherwise.
  std::vector<uint64_t> from_zero_;
  // Other epochs: epoch -> first batch -> one past the last batch of a merged range.
  std::map<uint32_t, std::map<uint64_t, uint64_t>> epochs_;
};

}  // namespace troupe
