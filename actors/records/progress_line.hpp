// Training progress for the person at the coordinator's terminal: within an epoch, one line
// redrawn in place (a bar, batches/s and the time left), at most five times a second; each
// finished epoch gets a line of its own. When stdout is not a terminal (a log file, a test)
// only the per-epoch lines are written. Owned by the coordinator; not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace troupe {

class progress_line {
 public:
  explicit progress_line(std::FILE* out = stdout);

  // `done` of `per_epoch` batches of epoch `epoch` (1-based) of `epochs`, at `rate` batches/s.
  void update(uint32_t epoch, uint32_t epochs, uint64_t done, uint64_t per_epoch, double rate,
              double eta_s);
  // A line of its own (an epoch's results); clears the progress line first.
  void line(const std::string& text);

  bool terminal() const { return terminal_; }

 private:
  std::FILE* out_;
  bool terminal_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace troupe
