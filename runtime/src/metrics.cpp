#include "troupe/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <sys/resource.h>
#include <unistd.h>

#include "troupe/error.hpp"

namespace troupe {

namespace {

// Label sets per metric: more means a label carries something unbounded (an id per request).
constexpr size_t max_series_per_metric = 10000;

bool valid_name(const std::string& s, bool colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool letter =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return s.rfind("__", 0) != 0;
}

std::string escape(const std::string& s, bool quotes) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (quotes && c == '"')
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

std::string number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", x);
}

const char* kind_name(metric_kind k) {
  switch (k) {
    case metric_kind::counter:
      return "counter";
    case metric_kind::gauge:
      return "gauge";
    case metric_kind::histogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

histogram_value::histogram_value(const std::vector<double>& bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds.size(); ++i) counts_[i].store(0);
}

void histogram_value::observe(double x) {
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), x) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.add(x);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> histogram_value::counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

caf::error metrics_registry::declare(const std::string& name, metric_kind kind,
                                     const std::string& help, std::vector<std::string> label_names,
                                     std::vector<double> bounds) {
  auto bad = [&](const std::string& why) {
    return make_error(errc::bad_configuration, "metric " + name + ": " + why);
  };
  if (!valid_name(name, true)) return bad("not a valid metric name");
  for (const auto& l : label_names)
    if (!valid_name(l, false) || l == "le") return bad("bad label name '" + l + "'");
  if (kind == metric_kind::histogram &&
      (bounds.empty() || !std::is_sorted(bounds.begin(), bounds.end()) ||
       std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end()))
    return bad("a histogram needs increasing bucket bounds");
  std::lock_guard<std::mutex> guard{mutex_};
  if (auto it = families_.find(name); it != families_.end()) {
    const auto& f = it->second;
    if (f.kind != kind || f.label_names != label_names || f.bounds != bounds)
      return bad("declared twice, differently");
    return {};
  }
  families_.emplace(name, family{kind, help, std::move(label_names), std::move(bounds), {}, {}});
  return {};
}

metrics_registry::family* metrics_registry::find(const std::string& name, metric_kind kind,
                                                 const std::vector<std::string>& values) {
  auto it = families_.find(name);
  if (it == families_.end() || it->second.kind != kind ||
      it->second.label_names.size() != values.size())
    return nullptr;
  auto& f = it->second;
  const size_t series = kind == metric_kind::histogram ? f.histograms.size() : f.values.size();
  const bool known = kind == metric_kind::histogram ? f.histograms.count(values) != 0
                                                    : f.values.count(values) != 0;
  if (!known && series >= max_series_per_metric) return nullptr;
  return &f;
}

metric_value* metrics_registry::value(const std::string& name, metric_kind kind,
                                      const std::vector<std::string>& values) {
  std::lock_guard<std::mutex> guard{mutex_};
  auto* f = find(name, kind, values);
  if (!f) return nullptr;
  auto& slot = f->values[values];
  if (!slot) slot = std::make_unique<metric_value>();
  return slot.get();
}

histogram_value* metrics_registry::histogram(const std::string& name,
                                             const std::vector<std::string>& values) {
  std::lock_guard<std::mutex> guard{mutex_};
  auto* f = find(name, metric_kind::histogram, values);
  if (!f) return nullptr;
  auto& slot = f->histograms[values];
  if (!slot) slot = std::make_unique<histogram_value>(f->bounds);
  return slot.get();
}

process_usage current_process_usage() {
  process_usage out;
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) == 0) {
    out.cpu_seconds = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                      double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    out.peak_rss_bytes = uint64_t(usage.ru_maxrss) * 1024;  // (KiB on Linux)
  }
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  if (statm >> pages >> resident) out.rss_bytes = resident * uint64_t(::sysconf(_SC_PAGESIZE));
  return out;
}

void update_process_metrics(metrics_registry& registry) {
  registry.declare("process_cpu_seconds_total", metric_kind::counter,
                   "user and system CPU time of this process");
  registry.declare("process_resident_memory_bytes", metric_kind::gauge,
                   "resident memory of this process");
  const auto usage = current_process_usage();
  if (auto* cpu = registry.counter("process_cpu_seconds_total")) cpu->set(usage.cpu_seconds);
  if (auto* rss = registry.gauge("process_resident_memory_bytes"))
    rss->set(double(usage.rss_bytes));
}

std::string render_labels(const std::vector<std::string>& names,
                          const std::vector<std::string>& values) {
  if (names.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i)
    out += fmt::format("{}{}=\"{}\"", i ? "," : "", names[i], escape(values[i], true));
  return out + "}";
}

std::string metrics_registry::prometheus_text() const {
  std::lock_guard<std::mutex> guard{mutex_};
  std::string out;
  for (const auto& [name, f] : families_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape(f.help, false), name,
                       kind_name(f.kind));
    for (const auto& [values, v] : f.values)
      out +=
          fmt::format("{}{} {}\n", name, render_labels(f.label_names, values), number(v->value()));
    for (const auto& [values, h] : f.histograms) {
      auto names = f.label_names;
      names.push_back("le");
      auto with_le = values;
      with_le.push_back("");
      uint64_t cumulative = 0;
      const auto counts = h->counts();
      for (size_t i = 0; i < counts.size(); ++i) {
        cumulative += counts[i];
        with_le.back() = i < f.bounds.size() ? number(f.bounds[i]) : "+Inf";
        out += fmt::format("{}_bucket{} {}\n", name, render_labels(names, with_le), cumulative);
      }
      const auto labels_text = render_labels(f.label_names, values);
      out += fmt::format("{}_sum{} {}\n", name, labels_text, number(h->sum()));
      out += fmt::format("{}_count{} {}\n", name, labels_text, cumulative);  // = the +Inf bucket
    }
  }
  return out;
}

}  // namespace troupe
