#include "actors/records/checkpoint_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <istream>
#include <mutex>
#include <streambuf>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include "troupe/detail/auth.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

namespace fs = std::filesystem;

constexpr char magic[8] = {'T', 'R', 'O', 'U', 'P', 'E', 'C', 'K'};
constexpr uint32_t format_version = 1;
constexpr uint32_t job_part = 0xffffffffu;
constexpr size_t digest_bytes = 32;
// A part is one message: never more than the codec's byte cap (plus room for framing).
constexpr uint64_t max_part_bytes = (uint64_t{16} << 20) + 4096;

void put_u32(std::string& out, uint32_t x) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((x >> (8 * i)) & 0xff);
}

void put_u64(std::string& out, uint64_t x) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((x >> (8 * i)) & 0xff);
}

// Each record: owner (bucket, or job_part), length, SHA-256 of the bytes, the bytes.
void put_part(std::string& out, uint32_t owner, const wire& w) {
  put_u32(out, owner);
  put_u64(out, w.bytes.size());
  const auto digest = auth::sha256(w.bytes.data(), w.bytes.size());
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  out.append(w.bytes.data(), w.bytes.size());
}

// Reads little-endian integers and byte runs from a checkpoint's bytes (a file, read as it is
// parsed, or bytes in memory), tracking failures.
struct reader {
  std::istream& in;
  bool ok = true;
  uint64_t position = 0;  // bytes read so far

  uint64_t number(int bytes) {
    unsigned char raw[8] = {};
    take(reinterpret_cast<char*>(raw), static_cast<uint64_t>(bytes));
    if (!ok) return 0;
    uint64_t x = 0;
    for (int i = 0; i < bytes; ++i) x |= uint64_t{raw[i]} << (8 * i);
    return x;
  }

  // `n` bytes into `out` (sized by the caller, who checked n first).
  void take(char* out, uint64_t n) {
    if (!in.read(out, static_cast<std::streamsize>(n))) ok = false;
    position += n;
  }

  bool at_end() { return in.peek() == std::char_traits<char>::eof(); }
};

// Bytes in memory as a stream (parse_checkpoint of a fuzzer's input).
struct view_buffer : std::streambuf {
  explicit view_buffer(std::string_view v) {
    char* p = const_cast<char*>(v.data());  // only read
    setg(p, p, p + v.size());
  }
};

std::string file_name(uint64_t step) {
  return fmt::format("ckpt-{:012d}.troupe", step);
}

// Checkpoint files in `dir`, newest (last written) first: a resumed job's checkpoints may have
// lower steps than the ones it resumed from.
std::vector<fs::path> checkpoint_files(const std::string& dir) {
  std::vector<std::pair<fs::file_time_type, fs::path>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && entry.path().extension() == ".troupe")
      found.emplace_back(fs::last_write_time(entry.path(), ec), entry.path());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<fs::path> out;
  for (auto& [time, path] : found) out.push_back(std::move(path));
  return out;
}

}  // namespace

// The file a checkpoint_writer writes, and the thread that hashes and writes each part while
// the caller makes the next one (at most two parts wait).
struct checkpoint_writer::file_state {
  std::string dir, path, temporary;
  int fd = -1;
  uint32_t keep = 0;
  uint32_t buckets = 0;
  int64_t bucket = -1;  // the bucket being written
  uint32_t parts = 0;   // its parts so far
  uint64_t count_at = 0;
  uint64_t written = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<uint32_t, wire>> queue;
  bool closing = false;
  caf::error failed;  // the first error of the writing thread
  std::thread writer;

  caf::error write(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return make_error(errc::io_failure,
                          "cannot write " + temporary + ": " + std::strerror(errno));
      bytes.remove_prefix(static_cast<size_t>(n));
      written += static_cast<uint64_t>(n);
    }
    return {};
  }

  caf::error end_bucket() {
    if (bucket < 0) return {};
    if (parts == 0)
      return make_error(errc::io_failure, fmt::format("bucket {} has no parts", bucket));
    std::string count;
    put_u32(count, parts);
    if (::pwrite(fd, count.data(), count.size(), static_cast<off_t>(count_at)) !=
        static_cast<ssize_t>(count.size()))
      return make_error(errc::io_failure,
                        "cannot write " + temporary + ": " + std::strerror(errno));
    return {};
  }

  caf::error write_part(uint32_t b, const wire& part) {
    if (static_cast<int64_t>(b) != bucket) {
      if (static_cast<int64_t>(b) != bucket + 1 || b >= buckets)
        return make_error(errc::io_failure, fmt::format("bucket {} out of order", b));
      if (auto err = end_bucket()) return err;
      bucket = b;
      parts = 0;
      std::string head;
      put_u32(head, b);
      count_at = written + 4;
      put_u32(head, 0);  // the count, written once the bucket's last part is in
      if (auto err = write(head)) return err;
    }
    if (part.bytes.size() > max_part_bytes)
      return make_error(errc::message_too_large, "a checkpoint part over the codec's cap");
    std::string head;
    put_u32(head, b);
    put_u64(head, part.bytes.size());
    const auto digest = auth::sha256(part.bytes.data(), part.bytes.size());
    head.append(reinterpret_cast<const char*>(digest.data()), digest.size());
    if (auto err = write(head)) return err;
    const uint64_t at = written;
    if (auto err = write({part.bytes.data(), part.bytes.size()})) return err;
    // The disk starts on this part now, while the next is hashed: finish()'s fsync then waits
    // for the last parts only. (A hint: an error shows in that fsync.)
    ::sync_file_range(fd, static_cast<off_t>(at), static_cast<off_t>(part.bytes.size()),
                      SYNC_FILE_RANGE_WRITE);
    ++parts;
    return {};
  }

  void run() {
    std::unique_lock<std::mutex> lock{mutex};
    for (;;) {
      changed.wait(lock, [&] { return !queue.empty() || closing; });
      if (queue.empty()) return;
      auto [b, part] = std::move(queue.front());
      lock.unlock();
      auto err = failed ? caf::error{} : write_part(b, part);
      lock.lock();
      queue.pop_front();
      if (err && !failed) failed = std::move(err);
      changed.notify_all();
    }
  }

  // Waits for the writing thread to write everything queued and stop.
  void drain() {
    {
      std::lock_guard<std::mutex> lock{mutex};
      closing = true;
    }
    changed.notify_all();
    if (writer.joinable()) writer.join();
  }
};

caf::expected<checkpoint_writer> checkpoint_writer::open(const std::string& dir,
                                                         const job_checkpoint& job,
                                                         uint32_t buckets, uint32_t keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(errc::io_failure, "cannot create " + dir + ": " + ec.message());
  checkpoint_writer out;
  out.f_ = std::make_unique<file_state>();
  auto& f = *out.f_;
  f.dir = dir;
  f.keep = keep;
  f.buckets = buckets;
  f.path = (fs::path(dir) / file_name(job.step)).string();
  f.temporary = f.path + ".tmp";
  f.fd = ::open(f.temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd < 0)
    return make_error(errc::io_failure,
                      "cannot create " + f.temporary + ": " + std::strerror(errno));
  std::string head(magic, sizeof magic);
  put_u32(head, format_version);
  put_u32(head, buckets);
  put_part(head, job_part, encode(job));
  if (auto err = f.write(head)) return err;
  f.writer = std::thread([&f] { f.run(); });
  return out;
}

checkpoint_writer::checkpoint_writer() = default;
checkpoint_writer::checkpoint_writer(checkpoint_writer&&) noexcept = default;
checkpoint_writer& checkpoint_writer::operator=(checkpoint_writer&& other) noexcept {
  if (this != &other) {
    close_unfinished();
    f_ = std::move(other.f_);
  }
  return *this;
}

checkpoint_writer::~checkpoint_writer() {
  close_unfinished();
}

void checkpoint_writer::close_unfinished() {
  if (!f_) return;
  f_->drain();
  if (f_->fd >= 0) {
    ::close(f_->fd);
    ::unlink(f_->temporary.c_str());  // never finished: no half-written file stays
  }
  f_.reset();
}

uint64_t checkpoint_writer::bytes_written() const {
  return f_ ? f_->written : 0;
}

caf::error checkpoint_writer::add(uint32_t bucket, wire part) {
  if (!f_ || f_->fd < 0) return make_error(errc::io_failure, "the checkpoint is closed");
  std::unique_lock<std::mutex> lock{f_->mutex};
  f_->changed.wait(lock, [&] { return f_->queue.size() < 2 || f_->failed; });
  if (f_->failed) return f_->failed;
  f_->queue.emplace_back(bucket, std::move(part));
  f_->changed.notify_all();
  return {};
}

caf::expected<std::string> checkpoint_writer::finish() {
  if (!f_ || f_->fd < 0) return make_error(errc::io_failure, "the checkpoint is closed");
  auto& f = *f_;
  f.drain();
  if (f.failed) return f.failed;
  if (f.bucket + 1 != static_cast<int64_t>(f.buckets))
    return make_error(errc::io_failure,
                      fmt::format("{} of {} buckets written", f.bucket + 1, f.buckets));
  if (auto err = f.end_bucket()) return err;
  // On disk before it takes the real name, and the name before older files go.
  if (::fsync(f.fd) != 0)
    return make_error(errc::io_failure, "cannot sync " + f.temporary + ": " + std::strerror(errno));
  ::close(f.fd);
  f.fd = -1;
  std::error_code ec;
  fs::rename(f.temporary, f.path, ec);
  if (ec) {
    ::unlink(f.temporary.c_str());
    return make_error(errc::io_failure, "cannot rename to " + f.path);
  }
  if (const int d = ::open(f.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
  const auto files = checkpoint_files(f.dir);
  for (size_t i = f.keep; i < files.size(); ++i) fs::remove(files[i], ec);
  return f.path;
}

caf::expected<std::string> write_checkpoint(const std::string& dir, const checkpoint& c,
                                            uint32_t keep) {
  auto writer = checkpoint_writer::open(dir, c.job, static_cast<uint32_t>(c.buckets.size()), keep);
  if (!writer) return std::move(writer.error());
  for (uint32_t b = 0; b < c.buckets.size(); ++b)
    for (const auto& part : c.buckets[b])
      if (auto err = writer->add(b, part)) return err;
  return writer->finish();
}

caf::expected<checkpoint> read_checkpoint(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return make_error(errc::io_failure, "cannot open " + path);
  return parse_checkpoint(file, fs::path(path).filename().string());
}

caf::expected<checkpoint> parse_checkpoint(std::string_view data, const std::string& name) {
  view_buffer buffer{data};
  std::istream in{&buffer};
  return parse_checkpoint(in, name);
}

namespace {

// Where one part lies in a checkpoint file, and its SHA-256.
struct part_place {
  uint64_t offset = 0;
  uint64_t size = 0;
  std::array<unsigned char, digest_bytes> digest{};
};

caf::error part_corrupt(const std::string& name, const std::string& what) {
  return make_error(errc::corrupt_data, name + ": " + what);
}

// Whether `w` has the digest its header gave.
bool digest_matches(const wire& w, const unsigned char* digest) {
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION  // the fuzzer reaches the decoders behind it
  const auto expected = auth::sha256(w.bytes.data(), w.bytes.size());
  return std::memcmp(expected.data(), digest, digest_bytes) == 0;
#else
  (void)w;
  (void)digest;
  return true;
#endif
}

// One record of `owner` (a bucket, or job_part): its header checked, its bytes read and
// checked against their SHA-256; and where they lie.
caf::expected<std::pair<part_place, wire>> read_record(reader& in, const std::string& name,
                                                       uint32_t owner, const std::string& what) {
  part_place at;
  const uint64_t found = in.number(4);
  at.size = in.number(8);
  in.take(reinterpret_cast<char*>(at.digest.data()), digest_bytes);
  if (!in.ok || found != owner || at.size > max_part_bytes)
    return part_corrupt(name, what + ": bad header");
  at.offset = in.position;
  wire w{wire_bytes(at.size)};  // (at most max_part_bytes, checked above)
  in.take(w.bytes.data(), at.size);
  if (!in.ok) return part_corrupt(name, what + ": truncated");
  if (!digest_matches(w, at.digest.data())) return part_corrupt(name, what + ": checksum mismatch");
  return std::make_pair(at, std::move(w));
}

// Reads a checkpoint's records in order, each checked (one part in memory at a time): the
// job's part, decoded and returned; before each bucket's parts `bucket(b)`, then each part to
// `take(where, part)`.
caf::expected<job_checkpoint> walk_checkpoint(
    std::istream& stream, const std::string& name, const std::function<void(uint32_t)>& bucket,
    const std::function<void(const part_place&, wire)>& take) {
  reader in{stream};
  char head[sizeof magic] = {};
  in.take(head, sizeof magic);
  if (!in.ok || std::memcmp(head, magic, sizeof magic) != 0)
    return part_corrupt(name, "not a Troupe checkpoint");
  if (in.number(4) != format_version) return part_corrupt(name, "unknown format version");
  const uint64_t buckets = in.number(4);
  if (!in.ok || buckets > (1u << 16)) return part_corrupt(name, "bad bucket count");
  auto job_record = read_record(in, name, job_part, "the job's part");
  if (!job_record) return std::move(job_record.error());
  auto job = decode<job_checkpoint>(job_record->second);
  if (!job) return part_corrupt(name, "the job's part: " + describe(job.error()));
  for (uint32_t b = 0; b < buckets; ++b) {
    const uint64_t owner = in.number(4), parts = in.number(4);
    if (!in.ok || owner != b || parts == 0 || parts > (1u << 20))
      return part_corrupt(name, fmt::format("bucket {}: bad header", b));
    bucket(b);
    for (uint64_t i = 0; i < parts; ++i) {
      auto record = read_record(in, name, b, fmt::format("bucket {} part {}", b, i));
      if (!record) return std::move(record.error());
      take(record->first, std::move(record->second));
    }
  }
  if (!in.at_end()) return part_corrupt(name, "trailing bytes");
  return std::move(*job);
}

}  // namespace

caf::expected<checkpoint> parse_checkpoint(std::istream& stream, const std::string& name) {
  checkpoint c;
  auto job = walk_checkpoint(
      stream, name, [&](uint32_t) { c.buckets.emplace_back(); },
      [&](const part_place&, wire w) { c.buckets.back().push_back(std::move(w)); });
  if (!job) return std::move(job.error());
  c.job = std::move(*job);
  return c;
}

// The open file a saved_checkpoint reads its parts from (closed with its last copy).
struct saved_checkpoint::file {
  int fd = -1;
  std::string name;
  std::vector<std::vector<part_place>> places;  // [bucket][part]
  ~file() {
    if (fd >= 0) ::close(fd);
  }
};

caf::expected<saved_checkpoint> saved_checkpoint::open(const std::string& path) {
  auto f = std::make_shared<file>();
  f->name = fs::path(path).filename().string();
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) return make_error(errc::io_failure, "cannot open " + path);
  std::ifstream stream(path, std::ios::binary);
  if (!stream) return make_error(errc::io_failure, "cannot open " + path);
  auto job = walk_checkpoint(
      stream, f->name, [&](uint32_t) { f->places.emplace_back(); },
      [&](const part_place& at, wire) { f->places.back().push_back(at); });
  if (!job) return std::move(job.error());
  saved_checkpoint out;
  out.job = std::move(*job);
  out.file_ = std::move(f);
  for (uint32_t b = 0; b < out.file_->places.size(); ++b) out.buckets_.push_back(b);
  return out;
}

uint32_t saved_checkpoint::parts(uint32_t b) const {
  return b < buckets_.size() ? static_cast<uint32_t>(file_->places[buckets_[b]].size()) : 0;
}

caf::expected<wire> saved_checkpoint::part(uint32_t b, uint32_t i) const {
  if (b >= buckets_.size() || i >= parts(b))
    return make_error(errc::malformed_message,
                      fmt::format("the checkpoint has no bucket {} part {}", b, i));
  const auto& at = file_->places[buckets_[b]][i];
  wire w{wire_bytes(at.size)};
  uint64_t done = 0;
  while (done < at.size) {
    const ssize_t n = ::pread(file_->fd, w.bytes.data() + done, at.size - done,
                              static_cast<off_t>(at.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return make_error(errc::io_failure, fmt::format("{}: cannot read bucket {} part {}",
                                                      file_->name, buckets_[b], i));
    done += static_cast<uint64_t>(n);
  }
  if (!digest_matches(w, at.digest.data()))
    return part_corrupt(file_->name, fmt::format("bucket {} part {}: changed since it was checked",
                                                 buckets_[b], i));
  return w;
}

saved_checkpoint saved_checkpoint::from(uint32_t first) const {
  saved_checkpoint out;
  out.job = job;
  out.file_ = file_;
  for (uint32_t b = first; b < buckets_.size(); ++b) out.buckets_.push_back(buckets_[b]);
  out.job.buckets = static_cast<uint32_t>(out.buckets_.size());
  return out;
}

caf::expected<loaded_checkpoint> read_newest_checkpoint(const std::string& dir) {
  loaded_checkpoint out;
  for (const auto& path : checkpoint_files(dir)) {
    auto c = saved_checkpoint::open(path.string());
    if (!c) {
      out.skipped.push_back(describe(c.error()));
      continue;
    }
    out.data = std::move(*c);
    out.path = path.string();
    return out;
  }
  std::string why = "no usable checkpoint in " + dir;
  for (const auto& s : out.skipped) why += "; " + s;
  return make_error(errc::io_failure, why);
}

caf::expected<saved_checkpoint> read_resume_checkpoint(const std::string& dir, const logger& log) {
  auto loaded = read_newest_checkpoint(dir);
  if (!loaded) return std::move(loaded.error());
  for (const auto& skipped : loaded->skipped)
    log.warn("skipping a damaged checkpoint: {}", skipped);
  log.info("resuming from {} (step {})", loaded->path, loaded->data.job.step);
  return std::move(loaded->data);
}

}  // namespace troupe
