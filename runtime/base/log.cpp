#include "troupe/log.hpp"

#include <chrono>
#include <ctime>

namespace troupe {

namespace {

constexpr std::pair<std::string_view, log_level> level_names[] = {{"error", log_level::error},
                                                                  {"warn", log_level::warn},
                                                                  {"info", log_level::info},
                                                                  {"debug", log_level::debug}};

}  // namespace

std::string_view to_string(log_level level) {
  for (const auto& [name, l] : level_names)
    if (l == level) return name;
  return "?";
}

bool parse_log_level(std::string_view text, log_level& out) {
  for (const auto& [name, level] : level_names) {
    if (text == name) {
      out = level;
      return true;
    }
  }
  return false;
}

void logger::emit(log_level at, const std::string& text) const {
  constexpr const char* labels[] = {"error", "warn ", "info ", "debug"};
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm local{};
  localtime_r(&seconds, &local);
  const std::string line =
      fmt::format("{:02}:{:02}:{:02}.{:03} {} {}: {}\n", local.tm_hour, local.tm_min, local.tm_sec,
                  ms.count(), labels[static_cast<int>(at)], name_, text);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace troupe
