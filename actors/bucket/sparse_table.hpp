// One bucket's share of an embedding table: the rows hashed to this bucket, created on first
// read with the deterministic init of troupe/layout.hpp, each with its own optimizer state
// (lazy: a row's Adam step count advances only when the row is updated), compact in a
// row_arena (a row's value, then its moments, in one slot). Pushed row gradients are checked
// before anything changes; each may be clipped to an L2 norm.
//
// Eviction and admission (table_config's evict and admit_after): a primary's read first
// decides which of its ids get rows (admission, counted in a sighting_sketch), then evicts
// rows the read does not name until the new ones fit (or expires rows under ttl), then creates
// the new rows. The evicted ids are kept for the primary to hand its backups (take_evicted):
// a backup applies them (evict) before it mirrors the same read, and never evicts on its own,
// so it holds the same rows. An id without a row reads as its initial value; its gradients are
// dropped. Owned by a bucket_store; not thread-safe.
#pragma once

#include <caf/expected.hpp>

#include <functional>
#include <optional>

#include "actors/bucket/row_arena.hpp"
#include "actors/bucket/sighting_sketch.hpp"
#include "messages/types.hpp"
#include "troupe/table_deltas.hpp"
#include "troupe/task.hpp"
#include "troupe/update_rule.hpp"

namespace troupe {

// Whether a task's table can be held: errc::bad_configuration for an unknown eviction policy,
// admit_after outside [1, max_admit_after], or a zero dim or capacity. A job checks every
// table when it starts.
caf::error check_table(const table_spec& spec);
// A checked table as buckets hold it, and back.
table_config config_of(const table_spec& spec);
table_spec spec_of(const table_config& config);

// Who reads rows: a worker through the primary (which decides evictions), a backup mirroring
// that read (evictions come from the primary), or an observer (evaluation, the console: it
// changes nothing, and rows it names but nobody created read as their initial values).
enum class row_reader : uint8_t { primary, mirror, observer };

class sparse_table {
 public:
  sparse_table(table_config config, uint32_t bucket, uint32_t buckets, uint64_t seed,
               optimizer_config optimizer, float clip,
               std::optional<update_rule> rule = std::nullopt);

  const std::string& name() const { return config_.name; }
  uint32_t row_dim() const { return config_.row_dim; }
  size_t size() const { return rows_.size(); }

  // The values of `ids`, creating the rows admission lets in; errc::unknown_bucket for an id
  // another bucket owns, errc::message_too_large when a table without eviction would outgrow
  // its share of the capacity.
  caf::expected<sparse_rows> read(const std::vector<uint64_t>& ids,
                                  row_reader reader = row_reader::primary);

  // The ids a primary evicted since the last call, to send its backups (whoever reads as a
  // primary takes them, or they pile up); and a backup applying them.
  std::vector<uint64_t> take_evicted() { return std::exchange(evicted_, {}); }
  void evict(const std::vector<uint64_t>& ids);

  table_counters counters() const;

  // --export-dir: the rows created or updated since the last cut and the ids evicted since
  // then; with `every_row`, every row (a snapshot). Evicted ids are kept from the first cut on
  // (a writer's first cut is a snapshot).
  table_delta cut(bool every_row);

  // ttl's clock, in seconds (tests set their own); the system clock by default.
  void set_clock(std::function<uint32_t()> now) { now_ = std::move(now); }

  // Whether `grads` may be applied: this table, whole rows, ids this bucket owns, values
  // finite and at most `max_abs` in magnitude, room for the rows it would create.
  caf::error check(const sparse_rows& grads, float max_abs) const;

  // Every row with its optimizer state and eviction mark, at most `rows_per_part` rows per
  // entry (sorted ids).
  std::vector<table_rows> save(size_t rows_per_part) const;

  // Puts saved rows back (after save()); errc::shape_mismatch for rows of another width or
  // with missing optimizer state, errc::unknown_bucket for rows another bucket owns.
  caf::error restore(const table_rows& saved);

  // The admission and eviction state besides the rows (sightings, clocks, counters), and
  // putting it back; errc::shape_mismatch for a sketch of another size.
  table_state save_state() const;
  caf::error restore_state(const table_state& saved);

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
  // Whether a push may create rows (no eviction, no admission): else it drops their gradients.
  bool creates_on_push() const;
  // A worker's read (primary or mirrored) of `ids`, whose rows are at `slots` (none: no row):
  // admits ids, makes room (a primary), creates the admitted rows into `slots`, marks the
  // rows read.
  void take_in(const std::vector<uint64_t>& ids, std::vector<std::optional<uint32_t>>& slots,
               row_reader reader);
  // Evicts rows until `fresh` more fit (rows marked kept stay); under ttl, expires old ones.
  void make_room(size_t fresh);
  void expire(uint32_t now);
  // `need` rows with marks at most `threshold`, the lower first (fewer when there are not that
  // many).
  std::vector<uint64_t> victims_at(uint32_t threshold, uint64_t need) const;
  void drop(const std::vector<uint64_t>& victims);
  void touch(uint32_t slot, uint32_t now);
  void changed(uint32_t slot) { rows_.meta(slot).changed = delta_; }
  void age_marks();
  // Part k of a row's floats: 0 its value, 1 and 2 its moments.
  template <class Floats>
  Floats part(Floats floats, unsigned k) const {
    return floats.subspan(size_t{k} * config_.row_dim, config_.row_dim);
  }
  std::span<float> value_of(uint32_t slot) { return part(rows_.floats(slot), 0); }
  // Moment k (1 or 2) of a slot's row; empty when the optimizer keeps no such moment.
  std::span<float> moment_of(uint32_t slot, unsigned k);
  caf::error check_ids(const std::vector<uint64_t>& ids, bool creates) const;

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
  std::optional<sighting_sketch> sightings_;  // admit_after > 1
  uint32_t tick_ = 0;                         // lru: reads so far (a row's mark: its last)
  uint64_t reads_since_aging_ = 0;            // lfu: row reads since marks were last halved
  uint32_t last_sweep_ = 0;                   // ttl: when rows were last expired
  std::vector<uint64_t> evicted_;             // primary: evicted, not yet taken
  table_counters counted_;
  std::function<uint32_t()> now_;
  bool tracking_ = false;  // cut() was called: keep evicted ids for the next
  uint32_t delta_ = 1;     // the delta being gathered (rows' meta.changed)
  std::vector<uint64_t> evicted_since_cut_;
};

}  // namespace troupe
