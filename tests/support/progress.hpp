// Tests act on progress, never on elapsed time. This is the one way a test waits during a job:
// for a line in a log (`await_log`), for a metric to reach a value (`await_metric`, such as the
// batches a job has finished), or for anything else it can observe (`await`). Every wait has a
// bound, a ceiling for the slowest machine: past it the wait returns false and the test fails
// with what it waited for, rather than hang. No test sleeps "until about halfway".
// For tests only.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "tests/support/loopback.hpp"

namespace troupe::testing {

// The default ceiling on one wait: far above what any wait here needs on a slow machine.
inline constexpr std::chrono::seconds progress_bound{180};

// Calls `reached` every 20 ms until it returns true (true) or `bound` has passed (false).
template <class Condition>
bool await(Condition&& reached, std::chrono::milliseconds bound = progress_bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    if (reached()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// How many times `text` occurs in `haystack` (overlaps not counted).
inline size_t count_of(std::string_view haystack, std::string_view text) {
  size_t n = 0;
  for (size_t at = haystack.find(text); at != std::string_view::npos;
       at = haystack.find(text, at + text.size()))
    ++n;
  return n;
}

// Waits until the file at `log` (a process's output) holds `text` at least `count` times.
inline bool await_log(const std::filesystem::path& log, std::string_view text,
                      std::chrono::milliseconds bound = progress_bound, size_t count = 1) {
  return await([&] { return count_of(read_file(log), text) >= count; }, bound);
}

// The value of metric `name` in Prometheus text (summed over its label sets), if it is there.
inline std::optional<double> metric_in(std::string_view exposition, std::string_view name) {
  std::optional<double> sum;
  std::istringstream lines{std::string(exposition)};
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;  // another metric whose name starts the same
    const auto value = line.rfind(' ');
    try {
      sum = sum.value_or(0) + std::stod(line.substr(value + 1));
    } catch (const std::exception&) {
    }
  }
  return sum;
}

// Metric `name` as the node serving metrics on 127.0.0.1:port reports it now.
inline std::optional<double> scrape_metric(uint16_t port, std::string_view name) {
  return metric_in(http_get(port, "/metrics"), name);
}

// Waits until metric `name` on 127.0.0.1:port is at least `at_least`.
inline bool await_metric(uint16_t port, std::string_view name, double at_least,
                         std::chrono::milliseconds bound = progress_bound) {
  return await([&] { return scrape_metric(port, name).value_or(-1) >= at_least; }, bound);
}

// The port a node announced in its log with "metrics at http://127.0.0.1:P" (--metrics-port 0),
// once it has; none if it has not within `bound`.
inline std::optional<uint16_t> await_metrics_port(
    const std::filesystem::path& log, std::chrono::milliseconds bound = progress_bound) {
  const std::string marker = "metrics at http://127.0.0.1:";
  if (!await_log(log, marker, bound)) return std::nullopt;
  const std::string text = read_file(log);
  return static_cast<uint16_t>(std::stoi(text.substr(text.find(marker) + marker.size())));
}

}  // namespace troupe::testing
