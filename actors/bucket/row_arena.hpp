// row_arena: the rows of one bucket's share of an embedding table, compact. Each row is
// `floats_per_row` floats (its value, then the optimizer's moments), an update count, an
// eviction mark and the delta it last changed in (row_meta), kept in slabs of slab_rows rows; an id
// finds its row's slot through an open-addressing index (linear probing, at most 3/4 full, deletion
// by backward shift), 12 bytes a position. A row costs its floats, 16 bytes of row_meta and 16 to
// 32 bytes of index, and never a heap node of its own (the hash map of vectors it replaces cost
// about 470 bytes a row of 140 bytes of data: issue 59). A slot freed by erase is reused. Owned by
// a sparse_table; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace troupe {

// A row's bookkeeping beside its floats.
struct row_meta {
  uint32_t steps = 0;    // updates applied to the row (Adam's bias correction)
  uint32_t changed = 0;  // the delta the row last changed in (sparse_table's export)
};

class row_arena {
 public:
  explicit row_arena(uint32_t floats_per_row);

  size_t size() const { return rows_; }

  // The slot holding `id`'s row, if there is one.
  std::optional<uint32_t> find(uint64_t id) const;
  // Adds a row of zeros for `id`, which must not have one, and returns its slot.
  uint32_t add(uint64_t id);
  // Drops `id`'s row, if there is one; its slot is reused.
  void erase(uint64_t id);

  std::span<float> floats(uint32_t slot);
  std::span<const float> floats(uint32_t slot) const;
  row_meta& meta(uint32_t slot);
  const row_meta& meta(uint32_t slot) const;
  uint32_t& steps(uint32_t slot) { return meta(slot).steps; }
  uint32_t steps(uint32_t slot) const { return meta(slot).steps; }
  // The eviction policy's score of a row: its last read tick or second, or its reads.
  uint32_t& mark(uint32_t slot) { return mark_slabs_[slot / slab_rows][slot % slab_rows]; }
  uint32_t mark(uint32_t slot) const { return mark_slabs_[slot / slab_rows][slot % slab_rows]; }

  // Every id that has a row, in no particular order.
  std::vector<uint64_t> ids() const;
  // Calls visit(id, slot) for every row, in no particular order; visit must not add or erase.
  template <class Visit>
  void each(Visit&& visit) const {
    for (const auto& e : index_)
      if (e.slot != 0) visit(e.key, e.slot - 1);
  }
  // Up to about `count` rows' slots, spread evenly over the index (an eviction's sample).
  std::vector<uint32_t> sample(size_t count) const;

 private:
  static constexpr uint32_t slab_rows = 4096;
  size_t home_of(uint64_t id) const;
  // The index position of `id`, or of the empty position where it would go.
  size_t position_of(uint64_t id) const;
  void grow_index();
  uint32_t new_slot();

  // A position of the index: an id and its slot + 1 (0: the position is empty), packed.
#pragma pack(push, 4)
  struct entry {
    uint64_t key = 0;
    uint32_t slot = 0;
  };
#pragma pack(pop)
  static_assert(sizeof(entry) == 12);
  std::byte* row_at(uint32_t slot) const;

  uint32_t floats_per_row_;
  size_t stride_;  // bytes a row: its row_meta, then its floats
  std::vector<entry> index_;
  std::vector<std::unique_ptr<std::byte[]>> slabs_;
  std::vector<std::unique_ptr<uint32_t[]>> mark_slabs_;
  std::vector<uint32_t> free_;  // slots erase freed
  uint32_t next_slot_ = 0;      // slots handed out so far (freed ones included)
  size_t rows_ = 0;
};

}  // namespace troupe
