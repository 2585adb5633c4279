#include "actors/bucket/sighting_sketch.hpp"

#include <algorithm>
#include <bit>

#include "troupe/random.hpp"

namespace troupe {

namespace {

// Salts the counters' hash apart from row_arena's index.
constexpr uint64_t sketch_salt = 0x6a09e667f3bcc909ull;

}  // namespace

sighting_sketch::sighting_sketch(uint64_t ids)
    : counters_(std::bit_ceil(std::max<uint64_t>(ids * 2, 4096)), 0) {}

std::pair<size_t, size_t> sighting_sketch::positions(uint64_t id) const {
  const uint64_t h = splitmix64_finalize(id ^ sketch_salt);
  const size_t mask = counters_.size() - 1;
  return {h & mask, (h >> 32) & mask};
}

uint32_t sighting_sketch::count(uint64_t id) const {
  const auto [a, b] = positions(id);
  return std::min(counters_[a], counters_[b]);
}

uint32_t sighting_sketch::see(uint64_t id) {
  const auto [a, b] = positions(id);
  const uint8_t low = std::min(counters_[a], counters_[b]);
  if (low < 255) {
    const uint8_t next = low + 1;
    counters_[a] = std::max(counters_[a], next);
    counters_[b] = std::max(counters_[b], next);
  }
  const uint32_t seen = std::min(counters_[a], counters_[b]);
  if (++since_halving_ >= counters_.size() * 8) halve();
  return seen;
}

void sighting_sketch::halve() {
  for (auto& c : counters_) c >>= 1;
  since_halving_ = 0;
}

bool sighting_sketch::restore(std::vector<uint8_t> counters, uint64_t since_halving) {
  if (counters.size() != counters_.size()) return false;
  counters_ = std::move(counters);
  since_halving_ = since_halving;
  return true;
}

}  // namespace troupe
