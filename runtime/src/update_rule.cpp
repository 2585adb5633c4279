#include "troupe/update_rule.hpp"

#include <fmt/format.h>

#include "troupe/error.hpp"

namespace troupe {

namespace {

constexpr optimizer_config::kind built_ins[] = {
    optimizer_config::kind::adam, optimizer_config::kind::adamw, optimizer_config::kind::sgd,
    optimizer_config::kind::momentum, optimizer_config::kind::dash};

}  // namespace

bool valid_rule_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
  return true;
}

std::optional<optimizer_config::kind> built_in_optimizer(const std::string& name) {
  for (auto k : built_ins)
    if (name == to_string(k)) return k;
  return std::nullopt;
}

caf::error update_rules::add(update_rule rule) {
  auto refuse = [&](const char* why) {
    return make_error(errc::bad_configuration, fmt::format("update rule '{}': {}", rule.name, why));
  };
  if (!valid_rule_name(rule.name)) return refuse("a name is 1 to 64 of a-z, 0-9, '-' and '_'");
  if (built_in_optimizer(rule.name)) return refuse("that optimizer is built in");
  if (find(rule.name)) return refuse("registered twice");
  if (rule.moments > 2) return refuse("at most two moments");
  if (!rule.apply) return refuse("no function");
  rules_.push_back(std::move(rule));
  return {};
}

const update_rule* update_rules::find(const std::string& name) const {
  for (const auto& r : rules_)
    if (r.name == name) return &r;
  return nullptr;
}

std::string update_rules::names() const {
  std::string out;
  for (const auto& r : rules_) out += (out.empty() ? "" : ", ") + r.name;
  return out.empty() ? "none" : out;
}

caf::error check_rule(const optimizer_config& o, const update_rules& rules) {
  if (o.type != optimizer_config::kind::app || rules.find(o.rule)) return {};
  return make_error(
      errc::bad_configuration,
      fmt::format("no update rule '{}' here (this binary has: {})", o.rule, rules.names()));
}

}  // namespace troupe
