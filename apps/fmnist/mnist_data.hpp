// Reads the Fashion-MNIST IDX files (gzipped or plain) into memory as compact uint8 pixels
// and labels. Used by the fmnist task at start-up; the loaded dataset is immutable and may be
// shared read-only between threads. Problems come back as troupe::errc::io_failure naming the
// file, never as exceptions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace troupe::fmnist {

inline constexpr const char* default_data_dir = "/usr/share/datasets/fashion-mnist";
inline constexpr uint32_t image_rows = 28;
inline constexpr uint32_t image_cols = 28;
inline constexpr uint32_t image_size = image_rows * image_cols;
inline constexpr uint32_t class_count = 10;

// A limit that loads every example in the file.
inline constexpr size_t all_examples = std::numeric_limits<size_t>::max();

// Images of 28x28 uint8 pixels, row after row, and one label 0..9 per image.
struct dataset {
  std::vector<uint8_t> pixels;  // size() * image_size bytes
  std::vector<uint8_t> labels;  // size() entries

  size_t size() const { return labels.size(); }
  bool empty() const { return labels.empty(); }
  std::span<const uint8_t> image(size_t i) const {
    return {pixels.data() + i * image_size, image_size};
  }
};

struct dataset_pair {
  dataset train;
  dataset test;
};

// Reads one images/labels pair of IDX files, keeping at most the first `limit` examples.
caf::expected<dataset> load_idx(const std::string& images_path, const std::string& labels_path,
                                size_t limit = all_examples);

// Reads split "train" or "t10k" from `dir`, preferring "<split>-images-idx3-ubyte" and
// falling back to the ".gz" names. A limit of 0 opens no file and returns an empty dataset.
caf::expected<dataset> load_split(const std::string& dir, const std::string& split,
                                  size_t limit = all_examples);

// Both splits: the training set (at most train_limit examples) and the test set.
caf::expected<dataset_pair> load_fashion_mnist(const std::string& dir,
                                               size_t train_limit = all_examples,
                                               size_t test_limit = all_examples);

}  // namespace troupe::fmnist
