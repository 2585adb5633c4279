#include "actors/records/checkpoint_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

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

// Reads little-endian integers and byte runs from a file's contents, tracking failures.
struct reader {
  std::string_view data;
  size_t at = 0;
  bool ok = true;

  uint64_t number(int bytes) {
    if (at + bytes > data.size()) {
      ok = false;
      return 0;
    }
    uint64_t x = 0;
    for (int i = 0; i < bytes; ++i)
      x |= uint64_t{static_cast<unsigned char>(data[at + i])} << (8 * i);
    at += bytes;
    return x;
  }

  std::string_view take(uint64_t n) {
    if (n > data.size() - std::min(at, data.size())) {
      ok = false;
      return {};
    }
    std::string_view out{data.data() + at, n};
    at += n;
    return out;
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

caf::expected<std::string> write_checkpoint(const std::string& dir, const checkpoint& c,
                                            uint32_t keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(errc::io_failure, "cannot create " + dir + ": " + ec.message());
  std::string out(magic, sizeof magic);
  put_u32(out, format_version);
  put_u32(out, static_cast<uint32_t>(c.buckets.size()));
  put_part(out, job_part, encode(c.job));
  for (uint32_t b = 0; b < c.buckets.size(); ++b) {
    put_u32(out, b);
    put_u32(out, static_cast<uint32_t>(c.buckets[b].size()));
    for (const auto& part : c.buckets[b]) put_part(out, b, part);
  }
  const fs::path path = fs::path(dir) / file_name(c.job.step);
  const fs::path temporary = path.string() + ".tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file.write(out.data(), static_cast<std::streamsize>(out.size()));
    file.flush();
    if (!file) return make_error(errc::io_failure, "cannot write " + temporary.string());
  }
  fs::rename(temporary, path, ec);
  if (ec) return make_error(errc::io_failure, "cannot rename to " + path.string());
  const auto files = checkpoint_files(dir);
  for (size_t i = keep; i < files.size(); ++i) fs::remove(files[i], ec);
  return path.string();
}

caf::expected<checkpoint> read_checkpoint(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return make_error(errc::io_failure, "cannot open " + path);
  const std::string data{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  return parse_checkpoint(data, fs::path(path).filename().string());
}

caf::expected<checkpoint> parse_checkpoint(std::string_view data, const std::string& name) {
  auto corrupt = [&](const std::string& what) {
    return make_error(errc::corrupt_data, name + ": " + what);
  };
  reader in{data};
  if (in.take(sizeof magic) != std::string_view(magic, sizeof magic))
    return corrupt("not a Troupe checkpoint");
  if (in.number(4) != format_version) return corrupt("unknown format version");
  const uint64_t buckets = in.number(4);
  if (!in.ok || buckets > (1u << 16)) return corrupt("bad bucket count");
  auto part = [&](uint32_t owner, const std::string& what) -> caf::expected<wire> {
    const uint64_t found = in.number(4), size = in.number(8);
    const auto digest = in.take(digest_bytes);
    if (!in.ok || found != owner || size > max_part_bytes) return corrupt(what + ": bad header");
    const auto bytes = in.take(size);
    if (!in.ok) return corrupt(what + ": truncated");
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION  // the fuzzer reaches the decoders behind it
    const auto expected = auth::sha256(bytes.data(), bytes.size());
    if (std::memcmp(expected.data(), digest.data(), digest_bytes) != 0)
      return corrupt(what + ": checksum mismatch");
#else
    (void)digest;
#endif
    return wire{wire_bytes(bytes.begin(), bytes.end())};
  };
  checkpoint c;
  auto job = part(job_part, "the job's part");
  if (!job) return std::move(job.error());
  auto decoded = decode<job_checkpoint>(*job);
  if (!decoded) return corrupt("the job's part: " + describe(decoded.error()));
  c.job = std::move(*decoded);
  for (uint32_t b = 0; b < buckets; ++b) {
    const uint64_t owner = in.number(4), parts = in.number(4);
    if (!in.ok || owner != b || parts == 0 || parts > (1u << 20))
      return corrupt(fmt::format("bucket {}: bad header", b));
    auto& saved = c.buckets.emplace_back();
    for (uint64_t i = 0; i < parts; ++i) {
      auto w = part(b, fmt::format("bucket {} part {}", b, i));
      if (!w) return std::move(w.error());
      saved.push_back(std::move(*w));
    }
  }
  if (in.at != data.size()) return corrupt("trailing bytes");
  return c;
}

caf::expected<loaded_checkpoint> read_newest_checkpoint(const std::string& dir) {
  loaded_checkpoint out;
  for (const auto& path : checkpoint_files(dir)) {
    auto c = read_checkpoint(path.string());
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

caf::expected<checkpoint> read_resume_checkpoint(const std::string& dir, const logger& log) {
  auto loaded = read_newest_checkpoint(dir);
  if (!loaded) return std::move(loaded.error());
  for (const auto& skipped : loaded->skipped)
    log.warn("skipping a damaged checkpoint: {}", skipped);
  log.info("resuming from {} (step {})", loaded->path, loaded->data.job.step);
  return std::move(loaded->data);
}

}  // namespace troupe
