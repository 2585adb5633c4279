// Levelled logging with fmt: one line per call on stderr, "12:03:04.512 info  worker-1: ...".
// A logger is a small value (a name and a level) that each actor or node keeps its own copy of;
// there is no global logger. Safe to use from any thread (one fwrite per line).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace troupe {

enum class log_level { error = 0, warn = 1, info = 2, debug = 3 };

// Parses "error", "warn", "info", "debug"; false if the text is none of them.
bool parse_log_level(std::string_view text, log_level& out);

class logger {
 public:
  explicit logger(std::string name = "troupe", log_level level = log_level::info)
      : name_(std::move(name)), level_(level) {}

  logger named(std::string name) const { return logger{std::move(name), level_}; }
  log_level level() const { return level_; }
  bool enabled(log_level at) const { return at <= level_; }

  template <class... Ts>
  void error(fmt::format_string<Ts...> f, Ts&&... xs) const {
    write(log_level::error, f, std::forward<Ts>(xs)...);
  }
  template <class... Ts>
  void warn(fmt::format_string<Ts...> f, Ts&&... xs) const {
    write(log_level::warn, f, std::forward<Ts>(xs)...);
  }
  template <class... Ts>
  void info(fmt::format_string<Ts...> f, Ts&&... xs) const {
    write(log_level::info, f, std::forward<Ts>(xs)...);
  }
  template <class... Ts>
  void debug(fmt::format_string<Ts...> f, Ts&&... xs) const {
    write(log_level::debug, f, std::forward<Ts>(xs)...);
  }

 private:
  template <class... Ts>
  void write(log_level at, fmt::format_string<Ts...> f, Ts&&... xs) const {
    if (enabled(at)) emit(at, fmt::format(f, std::forward<Ts>(xs)...));
  }
  void emit(log_level at, const std::string& text) const;

  std::string name_;
  log_level level_;
};

}  // namespace troupe
