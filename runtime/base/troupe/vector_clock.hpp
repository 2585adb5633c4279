// A vector clock: entry i counts the events (applied updates) of participant i (a worker).
// Buckets own one; pulls carry a copy, pushes return the copy they were computed from, and the
// difference of the sums is the push's staleness. A plain value type, not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace troupe {

enum class clock_order { equal, before, after, concurrent };

class vector_clock {
 public:
  vector_clock() = default;
  explicit vector_clock(size_t participants) : entries_(participants, 0) {}
  explicit vector_clock(std::vector<uint64_t> entries) : entries_(std::move(entries)) {}

  size_t size() const { return entries_.size(); }
  uint64_t at(size_t i) const { return i < entries_.size() ? entries_[i] : 0; }
  std::span<const uint64_t> entries() const { return entries_; }

  // Counts one event of participant i, growing the clock if i is new.
  void tick(size_t i);

  // Element-wise maximum: the clock that has seen everything either has seen.
  void merge(const vector_clock& other);

  uint64_t sum() const;

  // How this clock relates to `other` in happens-before order (missing entries count as 0).
  clock_order compare(const vector_clock& other) const;

  // Events this clock has seen that `read` had not: sum(this) - sum(read), 0 if read is ahead.
  uint64_t staleness_since(const vector_clock& read) const;

  friend bool operator==(const vector_clock& a, const vector_clock& b) {
    return a.compare(b) == clock_order::equal;
  }

 private:
  std::vector<uint64_t> entries_;
};

}  // namespace troupe
