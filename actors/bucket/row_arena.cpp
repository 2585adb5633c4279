#include "actors/bucket/row_arena.hpp"

#include <algorithm>
#include <new>

#include "troupe/random.hpp"

namespace troupe {

namespace {

constexpr size_t first_index_size = 1024;

}  // namespace

row_arena::row_arena(uint32_t floats_per_row)
    : floats_per_row_(std::max<uint32_t>(floats_per_row, 1)),
      stride_(sizeof(row_meta) + size_t{floats_per_row_} * sizeof(float)),
      index_(first_index_size) {}

size_t row_arena::home_of(uint64_t id) const {
  return splitmix64_finalize(id) & (index_.size() - 1);  // ids a bit apart land far apart
}

size_t row_arena::position_of(uint64_t id) const {
  const size_t mask = index_.size() - 1;
  size_t at = home_of(id);
  while (index_[at].slot != 0 && index_[at].key != id) at = (at + 1) & mask;
  return at;
}

std::optional<uint32_t> row_arena::find(uint64_t id) const {
  const size_t at = position_of(id);
  if (index_[at].slot == 0) return std::nullopt;
  return index_[at].slot - 1;
}

uint32_t row_arena::new_slot() {
  if (!free_.empty()) {
    const uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  if (next_slot_ % slab_rows == 0) {  // (left uninitialised: add() clears each slot it hands out)
    slabs_.push_back(std::make_unique_for_overwrite<std::byte[]>(size_t{slab_rows} * stride_));
    mark_slabs_.push_back(std::make_unique_for_overwrite<uint32_t[]>(slab_rows));
  }
  return next_slot_++;
}

uint32_t row_arena::add(uint64_t id) {
  if ((rows_ + 1) * 4 > index_.size() * 3) grow_index();
  const uint32_t slot = new_slot();
  new (row_at(slot)) row_meta{};
  mark(slot) = 0;
  std::fill_n(floats(slot).begin(), floats_per_row_, 0.0f);
  index_[position_of(id)] = entry{id, slot + 1};
  ++rows_;
  return slot;
}

void row_arena::erase(uint64_t id) {
  const size_t mask = index_.size() - 1;
  size_t hole = position_of(id);
  if (index_[hole].slot == 0) return;
  free_.push_back(index_[hole].slot - 1);
  --rows_;
  // Backward shift: move each later entry of the run into the hole if its home allows, so that
  // every entry stays reachable from its home without tombstones.
  for (size_t at = (hole + 1) & mask; index_[at].slot != 0; at = (at + 1) & mask) {
    const size_t home = home_of(index_[at].key);
    const bool movable = hole <= at ? (home <= hole || home > at) : (home <= hole && home > at);
    if (!movable) continue;
    index_[hole] = index_[at];
    hole = at;
  }
  index_[hole].slot = 0;
}

void row_arena::grow_index() {
  std::vector<entry> old(index_.size() * 2);
  old.swap(index_);
  for (const auto& e : old)
    if (e.slot != 0) index_[position_of(e.key)] = e;
}

std::byte* row_arena::row_at(uint32_t slot) const {
  return slabs_[slot / slab_rows].get() + size_t{slot % slab_rows} * stride_;
}

std::span<float> row_arena::floats(uint32_t slot) {
  return {reinterpret_cast<float*>(row_at(slot) + sizeof(row_meta)), floats_per_row_};
}

std::span<const float> row_arena::floats(uint32_t slot) const {
  return {reinterpret_cast<const float*>(row_at(slot) + sizeof(row_meta)), floats_per_row_};
}

row_meta& row_arena::meta(uint32_t slot) {
  return *std::launder(reinterpret_cast<row_meta*>(row_at(slot)));
}

const row_meta& row_arena::meta(uint32_t slot) const {
  return *std::launder(reinterpret_cast<const row_meta*>(row_at(slot)));
}

std::vector<uint32_t> row_arena::sample(size_t count) const {
  std::vector<uint32_t> out;
  if (rows_ == 0 || count == 0) return out;
  out.reserve(count + 1);
  const size_t stride = std::max<size_t>(index_.size() / count, 1);
  for (size_t start = 0; start < index_.size(); start += stride)
    for (size_t i = start; i < std::min(start + stride, index_.size()); ++i)
      if (index_[i].slot != 0) {  // the first row at or after each stride's start
        out.push_back(index_[i].slot - 1);
        break;
      }
  return out;
}

std::vector<uint64_t> row_arena::ids() const {
  std::vector<uint64_t> out;
  out.reserve(rows_);
  each([&](uint64_t id, uint32_t) { out.push_back(id); });
  return out;
}

}  // namespace troupe
