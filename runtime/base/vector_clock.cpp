#include "troupe/vector_clock.hpp"

#include <algorithm>
#include <numeric>

namespace troupe {

void vector_clock::tick(size_t i) {
  if (i >= entries_.size()) entries_.resize(i + 1, 0);
  ++entries_[i];
}

void vector_clock::merge(const vector_clock& other) {
  if (other.entries_.size() > entries_.size()) entries_.resize(other.entries_.size(), 0);
  for (size_t i = 0; i < other.entries_.size(); ++i)
    entries_[i] = std::max(entries_[i], other.entries_[i]);
}

uint64_t vector_clock::sum() const {
  return std::accumulate(entries_.begin(), entries_.end(), uint64_t{0});
}

clock_order vector_clock::compare(const vector_clock& other) const {
  bool some_less = false;
  bool some_greater = false;
  const size_t n = std::max(entries_.size(), other.entries_.size());
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = at(i);
    const uint64_t b = other.at(i);
    some_less |= a < b;
    some_greater |= a > b;
  }
  if (some_less && some_greater) return clock_order::concurrent;
  if (some_less) return clock_order::before;
  if (some_greater) return clock_order::after;
  return clock_order::equal;
}

uint64_t vector_clock::staleness_since(const vector_clock& read) const {
  const uint64_t now = sum();
  const uint64_t then = read.sum();
  return now > then ? now - then : 0;
}

}  // namespace troupe
