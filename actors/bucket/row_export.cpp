#include "actors/bucket/row_export.hpp"

#include "troupe/table_deltas.hpp"

namespace troupe {

caf::error row_exporter::write_next(bucket_store& store) {
  if (!writing()) return {};
  if (generation_ == 0) generation_ = next_generation(dir_, store.id());
  ++sequence_;
  const bool snapshot = sequence_ == 1 || force_snapshot_ || (sequence_ - 1) % snapshot_every_ == 0;
  auto err = write_delta(dir_, store.cut_delta(generation_, sequence_, snapshot));
  if (err) --sequence_;  // the next file takes its place, whole
  force_snapshot_ = static_cast<bool>(err);
  return err;
}

}  // namespace troupe
