// One bucket's share of an embedding table: the rows hashed to this bucket, created on first
// read with the deterministic init of troupe/layout.hpp, each with its own optimizer state
// (lazy: a row's Adam step count advances only when the row is updated), compact in a
// row_arena (a row's value, then its moments, in one slot). Pushed row
// gradients are checked before anything changes; each may be clipped to an L2 norm. Owned by
// a bucket_store; not thread-safe.
#pragma once

#include <caf/expected.hpp>

#include <optional>

#include "actors/bucket/row_arena.hpp"
#include "messages/types.hpp"
#include "troupe/update_rule.hpp"

namespace troupe {

class sparse_table {
 public:
  sparse_table(table_config config, uint32_t bucket, uint32_t buckets, uint64_t seed,
               optimizer_config optimizer, float clip,
               std::optional<update_rule> rule = std::nullopt);

  const std::string& name() const { return config_.name; }
  uint32_t row_dim() const { return config_.row_dim; }
  size_t size() const { return rows_.size(); }

  // The values of `ids`, creating missing rows; errc::unknown_bucket for an id another bucket
  // owns, errc::message_too_large when the table would outgrow its share of the capacity.
  caf::expected<sparse_rows> read(const std::vector<uint64_t>& ids);

  // Whether `grads` may be applied: this table, whole rows, ids this bucket owns, values
  // finite and at most `max_abs` in magnitude, room for the rows it would create.
  caf::error check(const sparse_rows& grads, float max_abs) const;

  // Every row with its optimizer state, at most `rows_per_part` rows per entry (sorted ids).
  std::vector<table_rows> save(size_t rows_per_part) const;

  // Puts saved rows back (after save()); errc::shape_mismatch for rows of another width or
  // with missing optimizer state, errc::unknown_bucket for rows another bucket owns.
  caf::error restore(const table_rows& saved);

  // Applies checked row gradients with learning-rate factor `lr_scale` (staleness-aware lr).
  // Returns the rows an app's update rule made non-finite (the bucket undoes the push whole).
  uint64_t apply(const sparse_rows& grads, float lr_scale);

  // A row's copy: its slot's floats (the value, then momentum velocity, Adam's moments or an
  // app rule's) and its update count.
  struct row {
    std::vector<float> floats;
    uint64_t steps = 0;
  };
  // Rows `ids` as they are now (none for a row not created yet), and putting them back: an
  // app rule's push is applied whole or not at all (bucket_store).
  struct row_copies {
    std::vector<uint64_t> ids;
    std::vector<std::optional<row>> rows;
  };
  row_copies copy_rows(const std::vector<uint64_t>& ids) const;
  void restore_rows(row_copies copies);

 private:
  // The slot of `id`'s row, created (its initial value, zero moments) when it has none.
  uint32_t slot_of(uint64_t id);
  // Part k of a row's floats: 0 its value, 1 and 2 its moments.
  template <class Floats>
  Floats part(Floats floats, unsigned k) const {
    return floats.subspan(size_t{k} * config_.row_dim, config_.row_dim);
  }
  std::span<float> value_of(uint32_t slot) { return part(rows_.floats(slot), 0); }
  // Moment k (1 or 2) of a slot's row; empty when the optimizer keeps no such moment.
  std::span<float> moment_of(uint32_t slot, unsigned k);
  caf::error check_ids(const std::vector<uint64_t>& ids) const;

  table_config config_;
  uint32_t bucket_;
  uint32_t buckets_;
  uint64_t seed_;
  optimizer_config optimizer_;
  float clip_;
  std::optional<update_rule> rule_;  // --optimizer NAME: the app's rule
  uint64_t capacity_;                // this bucket's share of the table's capacity
  unsigned moments_;                 // moments_of(optimizer_, rule_)
  row_arena rows_;
};

}  // namespace troupe
