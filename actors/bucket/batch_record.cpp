#include "actors/bucket/batch_record.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace troupe {

bool batch_record::overlaps(const batch_range& batches) const {
  if (batches.count == 0) return false;
  if (batches.epoch < from_zero_.size() && from_zero_[batches.epoch] > 0)
    return batches.first < from_zero_[batches.epoch];
  const auto epoch = epochs_.find(batches.epoch);
  if (epoch == epochs_.end()) return false;
  const auto& ranges = epoch->second;
  const uint64_t end = batches.first + batches.count;
  // The first range starting at or after `end` and everything after it cannot overlap; the one
  // before it overlaps exactly when it ends after `first`.
  auto after = ranges.lower_bound(end);
  if (after == ranges.begin()) return false;
  return std::prev(after)->second > batches.first;
}

void batch_record::add(const batch_range& batches) {
  if (batches.count == 0) return;
  const uint32_t e = batches.epoch;
  uint64_t first = batches.first, end = batches.first + batches.count;
  // (Not for an epoch far past the others': a malformed push must not size the vector.)
  const bool compact = e < from_zero_.size() + max_epochs_ahead;
  const uint64_t prefix = e < from_zero_.size() ? from_zero_[e] : 0;
  // The common case: from batch 0, or touching the range from it.
  if (compact && !epochs_.count(e) && first <= prefix) {
    if (from_zero_.size() <= e) from_zero_.resize(e + 1, 0);
    from_zero_[e] = std::max(prefix, end);
    return;
  }
  auto& ranges = epochs_[e];
  if (prefix > 0) {
    ranges.emplace(0, prefix);  // back among the ranges: this one leaves a gap after it
    from_zero_[e] = 0;
  }
  // Absorb every range that touches [first, end): the one before it and those within.
  auto at = ranges.upper_bound(first);
  if (at != ranges.begin() && std::prev(at)->second >= first) --at;
  while (at != ranges.end() && at->first <= end) {
    first = std::min(first, at->first);
    end = std::max(end, at->second);
    at = ranges.erase(at);
  }
  ranges.emplace(first, end);
  if (compact && ranges.size() == 1 && first == 0) {  // one range from batch 0 again
    if (from_zero_.size() <= e) from_zero_.resize(e + 1, 0);
    from_zero_[e] = end;
    epochs_.erase(e);
  }
}

std::vector<batch_range> batch_record::ranges() const {
  std::vector<batch_range> out;
  constexpr uint64_t most = UINT32_MAX;  // a saved range's count is 32 bits: longer ones split
  auto all = epochs_;  // (saving is rare: the from-zero epochs join the others, in order)
  for (uint32_t e = 0; e < from_zero_.size(); ++e)
    if (from_zero_[e] > 0) all[e].emplace(0, from_zero_[e]);
  for (const auto& [epoch, ranges] : all)
    for (const auto& [begin, end] : ranges)
      for (uint64_t first = begin; first < end; first += std::min(most, end - first))
        out.push_back(
            batch_range{epoch, first, static_cast<uint32_t>(std::min(most, end - first))});
  return out;
}

batch_record batch_record::from(const std::vector<batch_range>& ranges) {
  batch_record record;
  for (const auto& r : ranges) record.add(r);
  return record;
}

uint64_t batch_record::saved_bytes() const {
  uint64_t ranges =
      std::count_if(from_zero_.begin(), from_zero_.end(), [](uint64_t end) { return end > 0; });
  for (const auto& [epoch, in_epoch] : epochs_) ranges += in_epoch.size();
  return 16 * ranges;
}

}  // namespace troupe
