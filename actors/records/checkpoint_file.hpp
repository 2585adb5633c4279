// Checkpoint files: one file per checkpoint, `ckpt-<step>.troupe` in the checkpoint directory,
// holding the job's part (job_checkpoint) and every bucket's saved state (bucket_store::save),
// each part in Cap'n Proto with its own SHA-256. Files are written part by part to a temporary
// name, synced to disk (fsync) and renamed, so a crash never leaves a half-written checkpoint
// under a real name; the newest `keep` (by the time they were written) are kept. Reading checks
// every checksum and decodes the job's part; a file that fails is skipped with one clear line, and
// the next older one is tried. Pure file I/O, no actors; the coordinator calls it.
#pragma once

#include <functional>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/codec.hpp"
#include "messages/types.hpp"
#include "troupe/error.hpp"
#include "troupe/log.hpp"

namespace troupe {

struct checkpoint {
  job_checkpoint job;
  std::vector<std::vector<wire>> buckets;  // [bucket]: its saved parts, spec first
};

// Writes one checkpoint as its parts come, so that a writer holds one part at a time: open()
// with the job's part and the number of buckets, add() each bucket's parts in bucket order,
// then finish(), which syncs the file to disk, gives it its real name (syncing the directory)
// and keeps the newest `keep`. A writer dropped unfinished removes its temporary file.
class checkpoint_writer {
 public:
  static caf::expected<checkpoint_writer> open(const std::string& dir, const job_checkpoint& job,
                                               uint32_t buckets, uint32_t keep);
  checkpoint_writer(checkpoint_writer&& other) noexcept;
  checkpoint_writer& operator=(checkpoint_writer&& other) noexcept;
  ~checkpoint_writer();

  // Queues `part` of `bucket`: a thread of the writer hashes and writes it while the caller
  // makes the next (at most two wait). An error of an earlier part comes back here or from
  // finish().
  caf::error add(uint32_t bucket, wire part);
  // The file's path.
  caf::expected<std::string> finish();
  uint64_t bytes_written() const;  // (once finished)

 private:
  struct file_state;
  checkpoint_writer();
  void close_unfinished();
  std::unique_ptr<file_state> f_;
};

// Writes `c` as the newest checkpoint in `dir` (created if missing); keeps the newest `keep`.
// Returns the file's path.
caf::expected<std::string> write_checkpoint(const std::string& dir, const checkpoint& c,
                                            uint32_t keep);

// Reads one checkpoint file part by part (never the whole file at once besides its parts);
// errc::corrupt_data (with the part that failed) or io_failure.
caf::expected<checkpoint> read_checkpoint(const std::string& path);

// The checkpoint in a file's bytes (`name` for the errors), or in a stream of them.
caf::expected<checkpoint> parse_checkpoint(std::string_view data, const std::string& name);
caf::expected<checkpoint> parse_checkpoint(std::istream& in, const std::string& name);

// A checkpoint file as a resumed job reads it: open() checks every part's SHA-256 in one pass,
// one part in memory at a time, and keeps where each lies; part() reads one when asked (and
// checks it again), so that a coordinator never holds more of a checkpoint than it sends.
// Copies share the open file.
class saved_checkpoint {
 public:
  static caf::expected<saved_checkpoint> open(const std::string& path);

  job_checkpoint job;
  uint32_t buckets() const { return static_cast<uint32_t>(buckets_.size()); }
  uint32_t parts(uint32_t bucket) const;  // 0 for a bucket it does not have
  caf::expected<wire> part(uint32_t bucket, uint32_t index) const;
  // Its buckets from `first` on, as buckets 0, 1, ... (the tables of a --mode hybrid file).
  saved_checkpoint from(uint32_t first) const;

 private:
  struct file;
  std::shared_ptr<const file> file_;
  std::vector<uint32_t> buckets_;  // the file's bucket of each of this one's
};

struct loaded_checkpoint {
  saved_checkpoint data;
  std::string path;
  std::vector<std::string> skipped;  // one line per newer file that failed, with why
};

// The newest checkpoint in `dir` that reads back whole; errc::io_failure when there is none.
caf::expected<loaded_checkpoint> read_newest_checkpoint(const std::string& dir);

// --resume DIR: the newest checkpoint there, logging each damaged one skipped and the one
// taken (both coordinators start from it).
caf::expected<saved_checkpoint> read_resume_checkpoint(const std::string& dir, const logger& log);

// A coordinator's start with --resume DIR: `into` (in its state) gets the checkpoint, or the
// coordinator stops (job_failed) saying why.
template <class Self>
void resume_or_stop(Self* self, std::optional<saved_checkpoint>& into, const std::string& dir,
                    const logger& log) {
  auto resumed = read_resume_checkpoint(dir, log);
  if (resumed) {
    into = std::move(*resumed);
    return;
  }
  log.error("cannot resume: {}", describe(resumed.error()));
  self->quit(make_error(errc::job_failed, "cannot resume: " + describe(resumed.error())));
}

// Sends part `index` of bucket `bucket` of `saved` (read from the file now), then each later
// part once the one before is answered (one part in flight): `send(index, total, part)` makes
// the request, answered with a bool. After the last part `then`; `failed` when a part cannot be
// read or a request fails.
template <class Self, class Send>
void send_saved_parts(Self* self, std::shared_ptr<const saved_checkpoint> saved, uint32_t bucket,
                      Send send, std::function<void()> then,
                      std::function<void(const caf::error&)> failed, uint32_t index = 0) {
  const uint32_t total = saved->parts(bucket);
  auto part = saved->part(bucket, index);
  if (!part) return failed(part.error());
  send(index, total, std::move(*part))
      .then(
          [=](bool) {
            if (index + 1 == total) return then();
            send_saved_parts(self, saved, bucket, send, then, failed, index + 1);
          },
          [=](caf::error& err) { failed(err); });
}

}  // namespace troupe
