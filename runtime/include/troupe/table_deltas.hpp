// The stream of changed embedding rows that a job with --export-dir DIR writes for the serving
// side (docs/tables.md, "Following training"), and the reader that follows it. Each primary
// bucket with tables writes, every --export-every seconds, the rows changed since its last file
// and the ids it evicted, into DIR/bucket-BBBBB/GGGGGGGGGG-SSSSSSSSSSSS.delta; every K-th file,
// and the first of each writer (a generation: a bucket's primary, or a backup promoted in its
// place), is a .snapshot of every row instead, after which the files before it are removed.
// A file appears whole (written aside, then renamed) and ends with a CRC-32C of its bytes.
//
// A serving process follows training with a delta_follower (poll() as often as it likes), or
// reads a directory once with read_deltas(). Plain functions and a value class, no actors: any
// thread may use them, one follower per thread.
#pragma once

#include <caf/expected.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe {

// One table's part of a delta file: the ids evicted since the last file (to drop first), then
// the rows changed (created or updated) since then, with their values now.
struct table_delta {
  std::string table;
  uint32_t row_dim = 1;
  std::vector<uint64_t> evicted;
  std::vector<uint64_t> ids;
  std::vector<float> values;  // ids.size() * row_dim
};

// One file of a bucket's stream. `clock` is the bucket's update count when it was cut.
struct delta_file {
  uint32_t bucket = 0;
  uint64_t generation = 1;  // the writer's: a promoted backup or a restarted job writes anew
  uint64_t sequence = 1;    // within the generation, from 1
  uint64_t clock = 0;
  bool snapshot = false;  // every row of the bucket: what came before it no longer matters
  std::vector<table_delta> tables;
};

// DIR/bucket-BBBBB/GGGGGGGGGG-SSSSSSSSSSSS.delta (or .snapshot).
std::string delta_path(const std::string& dir, const delta_file& file);

// Writes `file` into `dir` whole (aside, then renamed); after a snapshot, removes the bucket's
// files before it. errc::io_failure when it cannot.
caf::error write_delta(const std::string& dir, const delta_file& file);

// One file, checked: errc::io_failure when it cannot be read, errc::corrupt_data when its
// checksum, version or sizes are wrong.
caf::expected<delta_file> read_delta(const std::string& path);

// The generation a new writer of bucket `bucket` takes: one past the newest in `dir`.
uint64_t next_generation(const std::string& dir, uint32_t bucket);

// A table as the files applied so far have it: ids sorted, values row after row.
struct followed_table {
  uint32_t row_dim = 1;
  std::vector<uint64_t> ids;
  std::vector<float> values;
};

class delta_follower {
 public:
  explicit delta_follower(std::string dir) : dir_(std::move(dir)) {}

  // Applies the files that appeared since the last poll, each bucket's in (generation,
  // sequence) order, starting from the newest snapshot when one is among them. A bucket whose
  // next file is missing (a gap) or does not read waits for a later poll. Returns the files
  // applied; errc::io_failure when the directory cannot be read.
  caf::expected<size_t> poll();

  // Every table's rows as of the files applied, all buckets together.
  std::map<std::string, followed_table> tables() const;

  // The clock of the last file applied of each bucket that has one.
  std::map<uint32_t, uint64_t> clocks() const;

 private:
  struct rows_of_table {
    uint32_t row_dim = 1;
    std::unordered_map<uint64_t, std::vector<float>> rows;
  };
  struct bucket_stream {
    uint64_t generation = 0, sequence = 0, clock = 0;
    std::map<std::string, rows_of_table> tables;
  };
  size_t follow(uint32_t bucket, const std::string& folder);
  void apply(bucket_stream& stream, const delta_file& file);

  std::string dir_;
  std::map<uint32_t, bucket_stream> buckets_;
};

// Every table in `dir` as of the last complete files: a follower's first poll.
caf::expected<std::map<std::string, followed_table>> read_deltas(const std::string& dir);

}  // namespace troupe
