#include "troupe/tensorboard.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "troupe/error.hpp"

namespace troupe {

namespace {

// -- protocol buffers, the few shapes an Event needs ---------------------------------------------

enum wire_type : uint8_t { varint = 0, fixed64 = 1, bytes = 2, fixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_key(std::string& out, uint32_t field, wire_type type) {
  put_varint(out, (uint64_t{field} << 3) | type);
}

template <class T>
void put_fixed(std::string& out, uint32_t field, T value) {
  put_key(out, field, sizeof(T) == 8 ? fixed64 : fixed32);
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // little-endian, as protobuf's fixed types
  out.append(raw, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, const std::string& value) {
  put_key(out, field, bytes);
  put_varint(out, value.size());
  out += value;
}

void put_number(std::string& out, uint32_t field, uint64_t value) {
  put_key(out, field, varint);
  put_varint(out, value);
}

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// tensorflow.Event: wall_time = 1, step = 2, file_version = 3, summary = 5.
std::string event(uint64_t step, const std::string* summary, const std::string* version) {
  std::string out;
  put_fixed(out, 1, unix_seconds());
  put_number(out, 2, step);
  if (version) put_bytes(out, 3, *version);
  if (summary) put_bytes(out, 5, *summary);
  return out;
}

// tensorflow.Summary with one Value (tag = 1, simple_value = 2, tensor = 8, metadata = 9).
std::string summary_of(const std::string& value) {
  std::string out;
  put_bytes(out, 1, value);
  return out;
}

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto& table = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

caf::expected<std::unique_ptr<tensorboard_writer>> tensorboard_writer::open(
    const std::string& directory) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec)
    return make_error(errc::io_failure,
                      fmt::format("--tensorboard: cannot create {}: {}", directory, ec.message()));
  static std::atomic<uint32_t> opened{0};
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const auto path = fmt::format("{}/events.out.tfevents.{}.{}.{}.{}", directory,
                                static_cast<uint64_t>(unix_seconds()), host, getpid(), opened++);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file)
    return make_error(errc::io_failure, fmt::format("--tensorboard: cannot write {}: {}", path,
                                                    std::strerror(errno)));
  std::unique_ptr<tensorboard_writer> out{new tensorboard_writer(file, path)};
  const std::string version = "brain.Event:2";
  out->record(event(0, nullptr, &version));
  out->flush();
  return out;
}

tensorboard_writer::~tensorboard_writer() {
  std::fclose(file_);
}

void tensorboard_writer::scalar(const std::string& tag, uint64_t step, double value) {
  std::string v;
  put_bytes(v, 1, tag);
  put_fixed(v, 2, static_cast<float>(value));
  const auto summary = summary_of(v);
  record(event(step, &summary, nullptr));
}

void tensorboard_writer::text(const std::string& tag, uint64_t step, const std::string& text) {
  std::string plugin;  // PluginData: plugin_name = 1
  put_bytes(plugin, 1, "text");
  std::string metadata;  // SummaryMetadata: plugin_data = 1
  put_bytes(metadata, 1, plugin);
  std::string
      tensor;  // TensorProto: dtype = 1 (DT_STRING = 7), no shape (a scalar), string_val = 8
  put_number(tensor, 1, 7);
  put_bytes(tensor, 2, std::string{});
  put_bytes(tensor, 8, text);
  std::string v;
  put_bytes(v, 1, tag);
  put_bytes(v, 8, tensor);
  put_bytes(v, 9, metadata);
  const auto summary = summary_of(v);
  record(event(step, &summary, nullptr));
}

void tensorboard_writer::flush() {
  std::fflush(file_);
}

// TFRecord: length (u64), its masked CRC, the data, its masked CRC; little-endian.
void tensorboard_writer::record(const std::string& data) {
  const uint64_t length = data.size();
  const uint32_t length_crc = masked_crc32c(&length, sizeof(length));
  const uint32_t data_crc = masked_crc32c(data.data(), data.size());
  std::fwrite(&length, sizeof(length), 1, file_);
  std::fwrite(&length_crc, sizeof(length_crc), 1, file_);
  std::fwrite(data.data(), 1, data.size(), file_);
  std::fwrite(&data_crc, sizeof(data_crc), 1, file_);
}

}  // namespace troupe
