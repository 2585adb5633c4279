// The table of the flags every Troupe binary accepts: one entry per flag, holding its name,
// help, the job it belongs to, how its text is parsed into launch_options, and how the
// effective value is shown again. Parsing, --help (defaults are those of launch_options{}),
// TROUPE_* variables and the report's `settings` all come from it (options.cpp). Adding a
// flag is one entry here plus its field in launch_options (docs/ARCHITECTURE.md, "Flags").
// Internal to runtime/src.
#pragma once

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "troupe/error.hpp"
#include "troupe/options.hpp"

namespace troupe {

// Which job a flag means something to: the parameter service (--mode ps, diloco and hybrid's
// tables), data parallel (--mode dp, hybrid), DiLoCo alone, what data parallel and DiLoCo share
// (how workers send and how fast they are made to run), or every job. A flag given for another
// job is refused.
enum class flag_scope { any, ps, dp, diloco, dp_or_diloco };

struct flag_spec {
  std::string name;
  std::string value_name;  // empty: a switch (--x, --x=true, --x=false)
  std::string help;
  flag_scope scope = flag_scope::any;
  std::function<caf::error(const std::string& text, launch_options& o)> apply;
  std::function<std::string(const launch_options& o)> show;  // "" for an unset text
};

const std::vector<flag_spec>& flag_table();

// A number of type T from `text`, or errc::bad_configuration naming `flag`.
template <class T>
caf::error parse_number(const std::string& flag, const std::string& text, T& out) {
  if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(value))
      return make_error(errc::bad_configuration,
                        fmt::format("--{}: not a number: '{}'", flag, text));
    out = static_cast<T>(value);
    return {};
  } else {
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size())
      return make_error(errc::bad_configuration,
                        fmt::format("--{}: not a non-negative integer: '{}'", flag, text));
    return {};
  }
}

// A switch is on when given bare or as true/1/yes, off as false/0/no.
caf::error parse_switch(const std::string& flag, const std::string& text, bool& out);

caf::error parse_role(const std::string& text, node_role& out);

}  // namespace troupe
