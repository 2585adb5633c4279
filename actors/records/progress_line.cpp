#include "actors/records/progress_line.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

namespace troupe {

progress_line::progress_line(std::FILE* out) : out_(out), terminal_(::isatty(::fileno(out))) {}

void progress_line::update(uint32_t epoch, uint32_t epochs, uint64_t done, uint64_t per_epoch,
                           double rate, double eta_s) {
  if (!terminal_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  drawn_ = true;
  constexpr int width = 30;
  const double share = per_epoch ? std::min(1.0, double(done) / double(per_epoch)) : 0.0;
  const int filled = static_cast<int>(share * width);
  const std::string text = fmt::format(
      "\r\033[Kepoch {}/{} [{}{}] {:3.0f}%  {:.0f} batches/s  eta {:.1f} s", epoch, epochs,
      std::string(filled, '#'), std::string(width - filled, '.'), share * 100, rate, eta_s);
  std::fputs(text.c_str(), out_);
  std::fflush(out_);
}

void progress_line::line(const std::string& text) {
  if (terminal_ && drawn_) std::fputs("\r\033[K", out_);
  drawn_ = false;
  std::fputs(text.c_str(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

}  // namespace troupe
