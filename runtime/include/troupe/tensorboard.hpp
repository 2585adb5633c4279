// TensorBoard event files: scalars and text written as TensorBoard's readers expect them
// (TFRecord framing with masked CRC-32C; Event and Summary protocol buffers encoded here, no
// protobuf library). A run is a directory; each writer adds a file of its own to it,
// events.out.tfevents.<unix seconds>.<host>.<pid>.<n>, so a standby coordinator that takes
// over writes to the same run and TensorBoard shows one curve. Values go to the file at once
// (buffered); flush() hands them to the OS, and the destructor does too.
// Owned by one thread (a coordinator's actor); not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <caf/expected.hpp>

namespace troupe {

class tensorboard_writer {
 public:
  // Creates `directory` (and its parents) if needed and a new event file in it;
  // errc::io_failure when it cannot.
  static caf::expected<std::unique_ptr<tensorboard_writer>> open(const std::string& directory);
  ~tensorboard_writer();
  tensorboard_writer(const tensorboard_writer&) = delete;
  tensorboard_writer& operator=(const tensorboard_writer&) = delete;

  // A scalar `tag` ("train/loss") at `step`, stamped with the wall time now. Not finite
  // values are written too (TensorBoard shows them as such).
  void scalar(const std::string& tag, uint64_t step, double value);
  // A text (the text plugin's, shown as markdown) `tag` at `step`.
  void text(const std::string& tag, uint64_t step, const std::string& text);
  void flush();

  const std::string& path() const { return path_; }

 private:
  tensorboard_writer(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  void record(const std::string& event);

  std::FILE* file_;
  std::string path_;
};

// CRC-32C (Castagnoli) of `n` bytes, and TFRecord's masked form of it (exposed for tests).
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

}  // namespace troupe
