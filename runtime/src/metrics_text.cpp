#include "troupe/metrics_text.hpp"

#include <cstdlib>
#include <map>
#include <sstream>

namespace troupe {

namespace {

// The family a sample belongs to: its own name, or a histogram's (or summary's) name.
std::string family_of(const std::string& name, const std::map<std::string, std::string>& types) {
  if (types.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const auto base = name.substr(0, name.size() - s.size());
      if (types.count(base)) return base;
    }
  }
  return name;
}

// Splits `name{labels} value` (or `name value`); false when the labels do not close or the
// value is not a number.
bool split_sample(const std::string& line, metric_sample& out) {
  const size_t name_end = line.find_first_of("{ ");
  if (name_end == std::string::npos || name_end == 0) return false;
  out.name = line.substr(0, name_end);
  size_t rest = name_end;
  if (line[name_end] == '{') {
    bool quoted = false;
    size_t i = name_end + 1;
    for (; i < line.size(); ++i) {
      if (quoted && line[i] == '\\') {
        ++i;
        continue;
      }
      if (line[i] == '"') quoted = !quoted;
      if (line[i] == '}' && !quoted) break;
    }
    if (i >= line.size()) return false;
    out.labels = line.substr(name_end + 1, i - name_end - 1);
    rest = i + 1;
  }
  std::istringstream tail{line.substr(rest)};
  tail >> out.value;
  char* end = nullptr;  // a number, +Inf, -Inf or NaN
  std::strtod(out.value.c_str(), &end);
  return !out.value.empty() && end == out.value.c_str() + out.value.size();
}

}  // namespace

std::vector<metric_sample> parse_prometheus_text(const std::string& text) {
  std::map<std::string, std::string> types, helps;
  std::vector<metric_sample> out;
  std::istringstream lines{text};
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0 || line.rfind("# HELP ", 0) == 0) {
      const size_t space = line.find(' ', 7);
      const std::string name = line.substr(7, space == std::string::npos ? space : space - 7);
      const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
      (line[2] == 'T' ? types : helps)[name] = rest;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    metric_sample s;
    if (!split_sample(line, s)) continue;
    s.family = family_of(s.name, types);
    s.type = types.count(s.family) ? types[s.family] : "untyped";
    s.help = helps.count(s.family) ? helps[s.family] : "";
    out.push_back(std::move(s));
  }
  return out;
}

std::string render_samples(const std::vector<metric_sample>& samples) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const metric_sample*>> families;
  for (const auto& s : samples) {
    auto& members = families[s.family];
    if (members.empty()) order.push_back(s.family);
    members.push_back(&s);
  }
  std::string out;
  for (const auto& family : order) {
    const auto& members = families[family];
    if (!members.front()->help.empty())
      out += "# HELP " + family + " " + members.front()->help + "\n";
    out += "# TYPE " + family + " " + members.front()->type + "\n";
    for (const auto* s : members)
      out += s->name + (s->labels.empty() ? "" : "{" + s->labels + "}") + " " + s->value + "\n";
  }
  return out;
}

}  // namespace troupe
