#include "actors/bucket/row_arena.hpp"

#include <algorithm>

namespace troupe {

namespace {

constexpr size_t first_index_size = 1024;

// splitmix64's finaliser: ids that differ in a bit land far apart.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

row_arena::row_arena(uint32_t floats_per_row)
    : floats_per_row_(std::max<uint32_t>(floats_per_row, 1)),
      keys_(first_index_size, 0),
      slots_(first_index_size, 0) {}

size_t row_arena::home_of(uint64_t id) const {
  return mix(id) & (keys_.size() - 1);
}

size_t row_arena::position_of(uint64_t id) const {
  const size_t mask = keys_.size() - 1;
  size_t at = home_of(id);
  while (slots_[at] != 0 && keys_[at] != id) at = (at + 1) & mask;
  return at;
}

std::optional<uint32_t> row_arena::find(uint64_t id) const {
  const size_t at = position_of(id);
  if (slots_[at] == 0) return std::nullopt;
  return slots_[at] - 1;
}

uint32_t row_arena::new_slot() {
  if (!free_.empty()) {
    const uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  if (next_slot_ % slab_rows == 0) {  // (left uninitialised: add() clears each slot it hands out)
    slabs_.push_back(std::make_unique_for_overwrite<float[]>(size_t{slab_rows} * floats_per_row_));
    meta_slabs_.push_back(std::make_unique_for_overwrite<row_meta[]>(slab_rows));
  }
  return next_slot_++;
}

uint32_t row_arena::add(uint64_t id) {
  if ((rows_ + 1) * 4 > keys_.size() * 3) grow_index();
  const uint32_t slot = new_slot();
  std::fill_n(floats(slot).begin(), floats_per_row_, 0.0f);
  meta(slot) = row_meta{};
  const size_t at = position_of(id);
  keys_[at] = id;
  slots_[at] = slot + 1;
  ++rows_;
  return slot;
}

void row_arena::erase(uint64_t id) {
  const size_t mask = keys_.size() - 1;
  size_t hole = position_of(id);
  if (slots_[hole] == 0) return;
  free_.push_back(slots_[hole] - 1);
  --rows_;
  // Backward shift: move each later entry of the run into the hole if its home allows, so that
  // every entry stays reachable from its home without tombstones.
  for (size_t at = (hole + 1) & mask; slots_[at] != 0; at = (at + 1) & mask) {
    const size_t home = home_of(keys_[at]);
    const bool movable = hole <= at ? (home <= hole || home > at) : (home <= hole && home > at);
    if (!movable) continue;
    keys_[hole] = keys_[at];
    slots_[hole] = slots_[at];
    hole = at;
  }
  slots_[hole] = 0;
}

void row_arena::grow_index() {
  std::vector<uint64_t> keys(keys_.size() * 2, 0);
  std::vector<uint32_t> slots(slots_.size() * 2, 0);
  keys.swap(keys_);
  slots.swap(slots_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (slots[i] == 0) continue;
    const size_t at = position_of(keys[i]);
    keys_[at] = keys[i];
    slots_[at] = slots[i];
  }
}

std::span<float> row_arena::floats(uint32_t slot) {
  return {slabs_[slot / slab_rows].get() + size_t{slot % slab_rows} * floats_per_row_,
          floats_per_row_};
}

std::span<const float> row_arena::floats(uint32_t slot) const {
  return {slabs_[slot / slab_rows].get() + size_t{slot % slab_rows} * floats_per_row_,
          floats_per_row_};
}

row_meta& row_arena::meta(uint32_t slot) {
  return meta_slabs_[slot / slab_rows][slot % slab_rows];
}

const row_meta& row_arena::meta(uint32_t slot) const {
  return meta_slabs_[slot / slab_rows][slot % slab_rows];
}

std::vector<uint32_t> row_arena::sample(size_t count) const {
  std::vector<uint32_t> out;
  if (rows_ == 0 || count == 0) return out;
  out.reserve(count + 1);
  const size_t stride = std::max<size_t>(keys_.size() / count, 1);
  for (size_t start = 0; start < keys_.size(); start += stride)
    for (size_t i = start; i < std::min(start + stride, keys_.size()); ++i)
      if (slots_[i] != 0) {  // the first row at or after each stride's start
        out.push_back(slots_[i] - 1);
        break;
      }
  return out;
}

std::vector<uint64_t> row_arena::ids() const {
  std::vector<uint64_t> out;
  out.reserve(rows_);
  for (size_t i = 0; i < keys_.size(); ++i)
    if (slots_[i] != 0) out.push_back(keys_[i]);
  return out;
}

}  // namespace troupe
