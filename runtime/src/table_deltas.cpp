#include "troupe/table_deltas.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>

#include "troupe/error.hpp"
#include "troupe/tensorboard.hpp"

namespace troupe {

namespace {

namespace fs = std::filesystem;

// The file's layout, little-endian: the magic, the format version, flags (1: snapshot), the
// bucket, the table count, generation, sequence and clock; per table its name's length and
// bytes, row_dim, the evicted and row counts, the evicted ids, the row ids, the values; last,
// the CRC-32C of everything before it.
constexpr char magic[8] = {'T', 'R', 'P', 'D', 'E', 'L', 'T', 'A'};
constexpr uint32_t format_version = 1;
constexpr uint32_t snapshot_flag = 1;
constexpr uint32_t max_row_dim = 1u << 16;

template <class T>
void put(std::string& out, const T& x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof(T));
}

template <class T>
void put_all(std::string& out, const std::vector<T>& xs) {
  out.append(reinterpret_cast<const char*>(xs.data()), xs.size() * sizeof(T));
}

std::string encoded(const delta_file& file) {
  std::string out(magic, sizeof(magic));
  put(out, format_version);
  put(out, file.snapshot ? snapshot_flag : uint32_t{0});
  put(out, file.bucket);
  put(out, static_cast<uint32_t>(file.tables.size()));
  put(out, file.generation);
  put(out, file.sequence);
  put(out, file.clock);
  for (const auto& t : file.tables) {
    put(out, static_cast<uint32_t>(t.table.size()));
    out += t.table;
    put(out, t.row_dim);
    put(out, static_cast<uint64_t>(t.evicted.size()));
    put(out, static_cast<uint64_t>(t.ids.size()));
    put_all(out, t.evicted);
    put_all(out, t.ids);
    put_all(out, t.values);
  }
  put(out, crc32c(out.data(), out.size()));
  return out;
}

// Reads the fields of an encoded file in order; every read checks that the bytes are there.
class reader {
 public:
  explicit reader(std::string_view bytes) : bytes_(bytes) {}

  template <class T>
  bool get(T& x) {
    if (bytes_.size() - at_ < sizeof(T)) return false;
    std::memcpy(&x, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  template <class T>
  bool get_all(std::vector<T>& xs, uint64_t count) {
    if (count > (bytes_.size() - at_) / sizeof(T)) return false;
    xs.resize(count);
    std::memcpy(xs.data(), bytes_.data() + at_, count * sizeof(T));
    at_ += count * sizeof(T);
    return true;
  }
  bool get_text(std::string& s, uint32_t length) {
    if (bytes_.size() - at_ < length) return false;
    s.assign(bytes_.data() + at_, length);
    at_ += length;
    return true;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

caf::error corrupt(const std::string& path, const std::string& why) {
  return make_error(errc::corrupt_data, fmt::format("table delta {}: {}", path, why));
}

bool read_table(reader& in, table_delta& t) {
  uint32_t name_length = 0;
  uint64_t evicted = 0, rows = 0;
  if (!in.get(name_length) || !in.get_text(t.table, name_length) || !in.get(t.row_dim) ||
      t.row_dim == 0 || t.row_dim > max_row_dim || !in.get(evicted) || !in.get(rows))
    return false;
  return in.get_all(t.evicted, evicted) && in.get_all(t.ids, rows) &&
         rows <= UINT64_MAX / t.row_dim && in.get_all(t.values, rows * t.row_dim);
}

std::string bucket_folder(uint32_t bucket) {
  return fmt::format("bucket-{:05}", bucket);
}

// A file's (generation, sequence, snapshot) from its name; nothing for other names.
struct file_key {
  uint64_t generation = 0, sequence = 0;
  bool snapshot = false;
  auto order() const { return std::pair{generation, sequence}; }
};

std::optional<file_key> key_of(const fs::path& path) {
  const std::string name = path.filename().string();
  unsigned long long generation = 0, sequence = 0;
  char kind[16] = {};
  if (std::sscanf(name.c_str(), "%10llu-%12llu.%15s", &generation, &sequence, kind) != 3)
    return std::nullopt;
  const std::string k = kind;
  if (k != "delta" && k != "snapshot") return std::nullopt;
  if (name != fmt::format("{:010}-{:012}.{}", generation, sequence, k)) return std::nullopt;
  return file_key{generation, sequence, k == "snapshot"};
}

// The bucket's files, oldest first.
std::vector<std::pair<file_key, fs::path>> files_of(const fs::path& folder) {
  std::vector<std::pair<file_key, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec))
    if (auto key = key_of(entry.path())) out.emplace_back(*key, entry.path());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first.order() < b.first.order(); });
  return out;
}

}  // namespace

std::string delta_path(const std::string& dir, const delta_file& file) {
  return (fs::path(dir) / bucket_folder(file.bucket) /
          fmt::format("{:010}-{:012}.{}", file.generation, file.sequence,
                      file.snapshot ? "snapshot" : "delta"))
      .string();
}

caf::error write_delta(const std::string& dir, const delta_file& file) {
  const fs::path path = delta_path(dir, file);
  const fs::path aside = path.parent_path() / ("." + path.filename().string() + ".tmp");
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  {
    std::ofstream out(aside, std::ios::binary | std::ios::trunc);
    const std::string bytes = encoded(file);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      fs::remove(aside, ec);
      return make_error(errc::io_failure, "cannot write the table delta " + aside.string());
    }
  }
  fs::rename(aside, path, ec);
  if (ec) return make_error(errc::io_failure, "cannot move the table delta to " + path.string());
  if (file.snapshot)  // compaction: what the snapshot holds, the files before it held
    for (const auto& [key, older] : files_of(path.parent_path()))
      if (key.order() < std::pair{file.generation, file.sequence}) fs::remove(older, ec);
  return {};
}

caf::expected<delta_file> read_delta(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(errc::io_failure, "cannot read the table delta " + path);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (bytes.size() < sizeof(magic) + sizeof(uint32_t) ||
      std::memcmp(bytes.data(), magic, sizeof(magic)) != 0)
    return corrupt(path, "not a table delta");
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - sizeof(stored_crc), sizeof(stored_crc));
  if (crc32c(bytes.data(), bytes.size() - sizeof(stored_crc)) != stored_crc)
    return corrupt(path, "its checksum does not match (damaged or cut short)");
  reader r(std::string_view(bytes).substr(sizeof(magic),
                                          bytes.size() - sizeof(magic) - sizeof(stored_crc)));
  delta_file out;
  uint32_t version = 0, flags = 0, tables = 0;
  if (!r.get(version) || version != format_version)
    return corrupt(
        path, fmt::format("format version {} (this reader knows {})", version, format_version));
  if (!r.get(flags) || !r.get(out.bucket) || !r.get(tables) || !r.get(out.generation) ||
      !r.get(out.sequence) || !r.get(out.clock))
    return corrupt(path, "its header is cut short");
  out.snapshot = (flags & snapshot_flag) != 0;
  for (uint32_t i = 0; i < tables; ++i)
    if (!read_table(r, out.tables.emplace_back()))
      return corrupt(path, "a table's rows do not fit the file");
  if (!r.done()) return corrupt(path, "bytes after its last table");
  return out;
}

uint64_t next_generation(const std::string& dir, uint32_t bucket) {
  const auto files = files_of(fs::path(dir) / bucket_folder(bucket));
  return files.empty() ? 1 : files.back().first.generation + 1;
}

caf::expected<size_t> delta_follower::poll() {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec))
    return make_error(errc::io_failure, "no table delta directory " + dir_);
  size_t applied = 0;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    unsigned bucket = 0;
    const std::string name = entry.path().filename().string();
    if (std::sscanf(name.c_str(), "bucket-%5u", &bucket) != 1 || name != bucket_folder(bucket))
      continue;
    applied += follow(bucket, entry.path().string());
  }
  if (ec) return make_error(errc::io_failure, "cannot list " + dir_ + ": " + ec.message());
  return applied;
}

size_t delta_follower::follow(uint32_t bucket, const std::string& folder) {
  auto& stream = buckets_[bucket];
  const auto last = std::pair{stream.generation, stream.sequence};
  auto files = files_of(folder);
  std::erase_if(files, [&](const auto& f) { return f.first.order() <= last; });
  // Start from the newest snapshot when there is one: it holds everything before it.
  for (size_t i = files.size(); i-- > 0;)
    if (files[i].first.snapshot) {
      files.erase(files.begin(), files.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  size_t applied = 0;
  for (const auto& [key, path] : files) {
    const bool next_in_line =
        key.generation == stream.generation && key.sequence == stream.sequence + 1;
    if (!key.snapshot && !next_in_line) break;  // a gap: wait for the snapshot that fills it
    auto file = read_delta(path.string());
    if (!file || file->bucket != bucket) break;  // being replaced: the next poll sees
    apply(stream, *file);
    ++applied;
  }
  return applied;
}

void delta_follower::apply(bucket_stream& stream, const delta_file& file) {
  if (file.snapshot) stream.tables.clear();
  for (const auto& t : file.tables) {
    auto& table = stream.tables[t.table];
    table.row_dim = t.row_dim;
    for (uint64_t id : t.evicted) table.rows.erase(id);
    for (size_t i = 0; i < t.ids.size(); ++i)
      table.rows[t.ids[i]].assign(t.values.begin() + i * t.row_dim,
                                  t.values.begin() + (i + 1) * t.row_dim);
  }
  stream.generation = file.generation;
  stream.sequence = file.sequence;
  stream.clock = file.clock;
}

std::map<std::string, followed_table> delta_follower::tables() const {
  // Each id lives in one bucket: every bucket's rows of a table, in id order.
  std::map<std::string, std::vector<std::pair<uint64_t, const std::vector<float>*>>> rows;
  std::map<std::string, followed_table> out;
  for (const auto& [bucket, stream] : buckets_)
    for (const auto& [name, table] : stream.tables) {
      out[name].row_dim = table.row_dim;
      for (const auto& [id, values] : table.rows) rows[name].emplace_back(id, &values);
    }
  for (auto& [name, merged] : out) {
    auto& of_table = rows[name];
    std::sort(of_table.begin(), of_table.end());
    merged.ids.reserve(of_table.size());
    merged.values.reserve(of_table.size() * merged.row_dim);
    for (const auto& [id, values] : of_table) {
      merged.ids.push_back(id);
      merged.values.insert(merged.values.end(), values->begin(), values->end());
    }
  }
  return out;
}

std::map<uint32_t, uint64_t> delta_follower::clocks() const {
  std::map<uint32_t, uint64_t> out;
  for (const auto& [bucket, stream] : buckets_)
    if (stream.generation > 0) out[bucket] = stream.clock;
  return out;
}

caf::expected<std::map<std::string, followed_table>> read_deltas(const std::string& dir) {
  delta_follower follower(dir);
  auto applied = follower.poll();
  if (!applied) return std::move(applied.error());
  return follower.tables();
}

}  // namespace troupe
