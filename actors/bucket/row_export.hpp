// row_export: a primary bucket's stream of its tables' changed rows, --export-dir
// (troupe/table_deltas.hpp has the format and the reader). A writer takes a new generation
// (one past the newest in the directory) at its first file, which is a snapshot, as is every
// snapshot_every-th after; the others hold what changed since the file before. A bucket that
// serves as primary (started, restarted, promoted) is a new writer from its first answered
// pull; a backup writes nothing.
// Owned by one parameter_bucket actor (shared with its exit hook, which writes the last file);
// not thread-safe.
#pragma once

#include <caf/error.hpp>

#include <string>

#include "actors/bucket/bucket_store.hpp"

namespace troupe {

class row_exporter {
 public:
  explicit row_exporter(const bucket_spec& config)
      : dir_(config.export_dir), snapshot_every_(config.export_snapshot_every) {}

  // Cuts the store's next file and writes it; errc::io_failure when it cannot (the rows it cut
  // go again in the next snapshot, which it then forces).
  caf::error write_next(bucket_store& store);

  // The store was replaced (restored): its next file is a snapshot.
  void snapshot_next() { force_snapshot_ = true; }

  // This bucket is a backup (its primary writes), or was promoted (it writes from now on).
  void set_backup(bool backup) { backup_ = backup; }
  // It answered a worker's pull as a primary: from now on it writes. (A bucket about to be made
  // a backup never does, however late the coordinator says so.)
  void served() { served_ = true; }
  // This bucket stopped being the primary (deposed): it writes no more.
  void stop() { stopped_ = true; }
  // Whether it is the bucket's writer now (its last file is due when it ends).
  bool writing() const { return served_ && !backup_ && !stopped_; }

 private:
  std::string dir_;
  uint32_t snapshot_every_;
  uint64_t generation_ = 0;  // 0: not a writer yet
  uint64_t sequence_ = 0;
  bool force_snapshot_ = false;
  bool backup_ = false;
  bool served_ = false;
  bool stopped_ = false;
};

}  // namespace troupe
