#include "actors/bucket/batch_record.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace troupe {

bool batch_record::overlaps(const batch_range& batches) const {
  const auto epoch = epochs_.find(batches.epoch);
  if (epoch == epochs_.end() || batches.count == 0) return false;
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
  auto& ranges = epochs_[batches.epoch];
  uint64_t first = batches.first, end = batches.first + batches.count;
  // Absorb every range that touches [first, end): the one before it and those within.
  auto at = ranges.upper_bound(first);
  if (at != ranges.begin() && std::prev(at)->second >= first) --at;
  while (at != ranges.end() && at->first <= end) {
    first = std::min(first, at->first);
    end = std::max(end, at->second);
    at = ranges.erase(at);
  }
  ranges.emplace(first, end);
}

std::vector<batch_range> batch_record::ranges() const {
  std::vector<batch_range> out;
  constexpr uint64_t most = UINT32_MAX;  // a saved range's count is 32 bits: longer ones split
  for (const auto& [epoch, ranges] : epochs_)
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
  uint64_t ranges = 0;
  for (const auto& [epoch, in_epoch] : epochs_) ranges += in_epoch.size();
  return 16 * ranges;
}

}  // namespace troupe
