// Levelled logging with fmt: one line per call on stderr, "12:03:04.512 info  worker-1: ...".
// A logger is a small value (a name and a level) that each actor or node keeps its own copy of;
// there is no global logger. Copies and named() loggers share their root's level, so that
// set_level() on any of them changes the whole node at once (the console's `log LEVEL`).
// Safe to use from any thread (one fwrite per line; the level is atomic).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace troupe {

enum class log_level { error = 0, warn = 1, info = 2, debug = 3 };

// Parses "error", "warn", "info", "debug"; false if the text is none of them.
bool parse_log_level(std::string_view text, log_level& out);
std::string_view to_string(log_level level);  // error | warn | info | debug

class logger {
 public:
  explicit logger(std::string name = "troupe", log_level level = log_level::info)
      : name_(std::move(name)), level_(std::make_shared<std::atomic<log_level>>(level)) {}

  // A logger under another name that shares this one's level.
  logger named(std::string name) const {
    logger out = *this;
    out.name_ = std::move(name);
    return out;
  }
  log_level level() const { return level_->load(std::memory_order_relaxed); }
  // Changes the level of this logger and of every copy sharing its root.
  void set_level(log_level level) const { level_->store(level, std::memory_order_relaxed); }
  bool enabled(log_level at) const { return at <= level(); }

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
  std::shared_ptr<std::atomic<log_level>> level_;
};

// A warning about an event that may repeat every step (a skipped step): said at its first
// time, then at most once per `every` with how many came since, instead of a flood. One
// owner; not thread-safe.
class throttled_warning {
 public:
  using clock = std::chrono::steady_clock;
  explicit throttled_warning(clock::duration every = std::chrono::minutes(1)) : every_(every) {}

  // Counts one event at `now`; returns how many to say now (0: stay quiet): 1 the first time,
  // then those since the last time said, once `every` has passed.
  uint64_t count(clock::time_point now) {
    ++unsaid_;
    if (said_ && now - *said_ < every_) return 0;
    said_ = now;
    const uint64_t n = unsaid_;
    unsaid_ = 0;
    return n;
  }

 private:
  clock::duration every_;
  std::optional<clock::time_point> said_;
  uint64_t unsaid_ = 0;
};

}  // namespace troupe
