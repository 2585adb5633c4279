#include "apps/fmnist/mnist_data.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include <zlib.h>

#include "troupe/error.hpp"

namespace troupe::fmnist {
namespace {

constexpr uint32_t images_magic = 0x00000803;     // unsigned bytes, 3 dimensions
constexpr uint32_t labels_magic = 0x00000801;     // unsigned bytes, 1 dimension
constexpr uint32_t max_file_examples = 1u << 21;  // far above any MNIST-style file

struct gz_closer {
  void operator()(gzFile f) const { gzclose(f); }
};
using gz_file = std::unique_ptr<gzFile_s, gz_closer>;

caf::error fail(const std::string& path, const std::string& what) {
  return make_error(errc::io_failure, path + ": " + what);
}

std::string hex(uint32_t word) {
  char text[11];
  std::snprintf(text, sizeof text, "0x%08x", word);
  return text;
}

// Reads exactly out.size() bytes, in chunks small enough for gzread's unsigned length.
bool read_exact(gzFile f, std::span<uint8_t> out) {
  constexpr size_t chunk = size_t{1} << 24;
  size_t done = 0;
  while (done < out.size()) {
    auto want = static_cast<unsigned>(std::min(chunk, out.size() - done));
    int got = gzread(f, out.data() + done, want);
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

// Opens `path` (gzip or plain; zlib reads both) and reads its header of big-endian words.
caf::error open_idx(const std::string& path, gz_file& file, std::span<uint32_t> header) {
  file.reset(gzopen(path.c_str(), "rb"));
  if (!file) return fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::array<uint8_t, 16> raw{};
  if (!read_exact(file.get(), {raw.data(), header.size() * 4}))
    return fail(path, "truncated or corrupt IDX header");
  for (size_t i = 0; i < header.size(); ++i) {
    const uint8_t* p = raw.data() + 4 * i;
    header[i] = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  }
  return {};
}

// Reads at most `limit` images; `file_count` receives the count the header declares.
caf::error read_images(const std::string& path, size_t limit, dataset& out, uint32_t& file_count) {
  gz_file file;
  std::array<uint32_t, 4> header{};  // magic, count, rows, cols
  if (auto err = open_idx(path, file, header)) return err;
  if (header[0] != images_magic)
    return fail(path, "bad magic number " + hex(header[0]) + ", expected " + hex(images_magic));
  if (header[1] > max_file_examples)
    return fail(path, "implausible image count " + std::to_string(header[1]));
  if (header[2] != image_rows || header[3] != image_cols)
    return fail(path, "images are " + std::to_string(header[2]) + "x" + std::to_string(header[3]) +
                          ", expected 28x28");
  file_count = header[1];
  size_t n = std::min<size_t>(limit, file_count);
  out.pixels.assign(n * image_size, 0);
  if (!read_exact(file.get(), out.pixels))
    return fail(path, "truncated or corrupt: fewer than " + std::to_string(n) + " images");
  return {};
}

// Reads at most `limit` labels, each checked to lie in 0..9.
caf::error read_labels(const std::string& path, size_t limit, dataset& out, uint32_t& file_count) {
  gz_file file;
  std::array<uint32_t, 2> header{};  // magic, count
  if (auto err = open_idx(path, file, header)) return err;
  if (header[0] != labels_magic)
    return fail(path, "bad magic number " + hex(header[0]) + ", expected " + hex(labels_magic));
  if (header[1] > max_file_examples)
    return fail(path, "implausible label count " + std::to_string(header[1]));
  file_count = header[1];
  size_t n = std::min<size_t>(limit, file_count);
  out.labels.assign(n, 0);
  if (!read_exact(file.get(), out.labels))
    return fail(path, "truncated or corrupt: fewer than " + std::to_string(n) + " labels");
  auto bad = std::find_if(out.labels.begin(), out.labels.end(),
                          [](uint8_t y) { return y >= class_count; });
  if (bad != out.labels.end())
    return fail(path, "label " + std::to_string(*bad) + " at index " +
                          std::to_string(bad - out.labels.begin()) + " is outside 0..9");
  return {};
}

// The plain file when present, otherwise its ".gz" sibling.
std::string pick_file(const std::string& dir, const std::string& name) {
  auto plain = std::filesystem::path(dir) / name;
  std::error_code ec;
  if (std::filesystem::is_regular_file(plain, ec)) return plain.string();
  return plain.string() + ".gz";
}

}  // namespace

caf::expected<dataset> load_idx(const std::string& images_path, const std::string& labels_path,
                                size_t limit) {
  dataset out;
  uint32_t image_count = 0;
  uint32_t label_count = 0;
  if (auto err = read_images(images_path, limit, out, image_count)) return err;
  if (auto err = read_labels(labels_path, limit, out, label_count)) return err;
  if (image_count != label_count)
    return fail(images_path, std::to_string(image_count) + " images but " + labels_path + " has " +
                                 std::to_string(label_count) + " labels");
  return out;
}

caf::expected<dataset> load_split(const std::string& dir, const std::string& split, size_t limit) {
  if (limit == 0) return dataset{};
  return load_idx(pick_file(dir, split + "-images-idx3-ubyte"),
                  pick_file(dir, split + "-labels-idx1-ubyte"), limit);
}

caf::expected<dataset_pair> load_fashion_mnist(const std::string& dir, size_t train_limit,
                                               size_t test_limit) {
  auto train = load_split(dir, "train", train_limit);
  if (!train) return train.error();
  auto test = load_split(dir, "t10k", test_limit);
  if (!test) return test.error();
  return dataset_pair{std::move(*train), std::move(*test)};
}

}  // namespace troupe::fmnist
