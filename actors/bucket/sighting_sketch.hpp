// sighting_sketch: how often each id without a row has been seen, for a table's admission
// (admit_after): a count-min sketch of byte counters, two per id, updated conservatively (only
// the smaller counters grow), so a count is never below the true one and is above it only when
// both of an id's counters are shared with busier ids. Every `width` * 8 sightings all counters
// are halved (TinyLFU's reset), so that ids seen long ago fade and a vocabulary far larger than
// the sketch does not fill it. Bytes: `width` (a power of two). Owned by a sparse_table; not
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace troupe {

class sighting_sketch {
 public:
  // Counters for about `ids` ids at a time (at least 4096 counters).
  explicit sighting_sketch(uint64_t ids);

  // Counts one more sighting of `id` and returns its count so far (at most 255).
  uint32_t see(uint64_t id);
  uint32_t count(uint64_t id) const;

  // The counters and the sightings since the last halving, to save and put back (restore()
  // refuses counters of another width).
  const std::vector<uint8_t>& counters() const { return counters_; }
  uint64_t since_halving() const { return since_halving_; }
  bool restore(std::vector<uint8_t> counters, uint64_t since_halving);

 private:
  std::pair<size_t, size_t> positions(uint64_t id) const;
  void halve();

  std::vector<uint8_t> counters_;
  uint64_t since_halving_ = 0;
};

}  // namespace troupe
