// How flag_table.cpp declares a flag in one entry: binders that make a flag_spec from a name,
// a help text and the launch_options field it sets (number, duration, text, toggle, choice),
// or from its own parser (custom). Internal to runtime/src.
#pragma once

#include <initializer_list>
#include <utility>

#include "flag_table.hpp"

namespace troupe::flags {

using scope = flag_scope;

// A field of launch_options, read and written through one accessor (for const and not).
template <class T>
auto field(T launch_options::*member) {
  return [member](auto& o) -> auto& {
    return o.*member;
  };
}

template <class Get>
flag_spec number(std::string name, std::string value, std::string help, Get get,
                 scope s = scope::any) {
  return {name,
          std::move(value),
          std::move(help),
          s,
          [name, get](const std::string& text, launch_options& o) {
            return parse_number(name, text, get(o));
          },
          [get](const launch_options& o) { return fmt::format("{}", get(o)); }};
}

// A duration given as a whole number of its unit (seconds, milliseconds).
template <class Get>
flag_spec duration(std::string name, std::string value, std::string help, Get get) {
  return {name,
          std::move(value),
          std::move(help),
          scope::any,
          [name, get](const std::string& text, launch_options& o) {
            auto& d = get(o);
            typename std::decay_t<decltype(d)>::rep count = 0;
            if (auto err = parse_number(name, text, count)) return err;
            d = std::decay_t<decltype(d)>{count};
            return caf::error{};
          },
          [get](const launch_options& o) { return fmt::format("{}", get(o).count()); }};
}

template <class Get>
flag_spec text(std::string name, std::string value, std::string help, Get get,
               scope s = scope::any) {
  return {std::move(name),
          std::move(value),
          std::move(help),
          s,
          [get](const std::string& text, launch_options& o) {
            get(o) = text;
            return caf::error{};
          },
          [get](const launch_options& o) { return std::string{get(o)}; }};
}

// A switch; `on` is what the field becomes when the switch is given (false for --no-x).
template <class Get>
flag_spec toggle(std::string name, std::string help, Get get, scope s = scope::any,
                 bool on = true) {
  return {name,
          "",
          std::move(help),
          s,
          [name, get, on](const std::string& text, launch_options& o) {
            bool given = false;
            if (auto err = parse_switch(name, text, given)) return err;
            get(o) = given == on;
            return caf::error{};
          },
          [get, on](const launch_options& o) { return get(o) == on ? "true" : "false"; }};
}

// One of `choices`, each named by to_string.
template <class Get, class E>
flag_spec choice(std::string name, std::string value, std::string help, Get get,
                 std::initializer_list<E> choices, scope s = scope::any) {
  std::vector<E> all(choices);
  return {name,
          std::move(value),
          std::move(help),
          s,
          [name, get, all](const std::string& text, launch_options& o) {
            std::string names;
            for (E c : all) {
              if (text == to_string(c)) {
                get(o) = c;
                return caf::error{};
              }
              names += (names.empty() ? "" : ", ") + std::string{to_string(c)};
            }
            return make_error(errc::bad_configuration,
                              fmt::format("--{} must be one of {}, not '{}'", name, names, text));
          },
          [get](const launch_options& o) { return std::string{to_string(get(o))}; }};
}

// Any other flag: its own parser and its own way of showing the value.
inline flag_spec custom(std::string name, std::string value, std::string help, scope s,
                        std::function<caf::error(const std::string&, launch_options&)> apply,
                        std::function<std::string(const launch_options&)> show) {
  return {std::move(name), std::move(value), std::move(help), s, std::move(apply), std::move(show)};
}

// A parser of troupe/options.hpp (parse_host_port, parse_consistency, ...) and where its
// value goes.
template <class Parsed, class Set>
auto parsed_by(caf::expected<Parsed> (*parse)(const std::string&), Set set) {
  return [parse, set](const std::string& text, launch_options& o) -> caf::error {
    auto value = parse(text);
    if (!value) return std::move(value.error());
    set(o, std::move(*value));
    return {};
  };
}

}  // namespace troupe::flags
