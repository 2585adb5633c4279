// Metrics of one process: counters, gauges and histograms registered by name, each with a
// fixed set of label names and any number of labelled series, rendered in the Prometheus text
// exposition format (version 0.0.4). A registry belongs to one node (launch.cpp makes one per
// process and hands it to the actors there); there is no global registry. Registering is
// guarded by a mutex; updating a series is lock-free (atomics), so actors on any thread may
// update the series they hold. Series handles stay valid as long as the registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace troupe {

enum class metric_kind { counter, gauge, histogram };

// One labelled series of a counter or a gauge.
class metric_value {
 public:
  void add(double x) {
    double now = value_.load(std::memory_order_relaxed);
    while (!value_.compare_exchange_weak(now, now + x, std::memory_order_relaxed)) {
    }
  }
  void set(double x) { value_.store(x, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// One labelled series of a histogram: counts per upper bound (cumulative when rendered).
class histogram_value {
 public:
  explicit histogram_value(const std::vector<double>& bounds);
  void observe(double x);
  std::vector<uint64_t> counts() const;  // per bound, then +Inf; not cumulative
  double sum() const { return sum_.value(); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double>& bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  metric_value sum_;
  std::atomic<uint64_t> count_{0};
};

using labels = std::vector<std::pair<std::string, std::string>>;

class metrics_registry {
 public:
  // Declares a metric; declaring the same name again with the same kind and labels is fine
  // (and returns nothing new), otherwise errc::bad_configuration. Names follow Prometheus:
  // [a-zA-Z_:][a-zA-Z0-9_:]*; counters should end in _total.
  caf::error declare(const std::string& name, metric_kind kind, const std::string& help,
                     std::vector<std::string> label_names = {}, std::vector<double> bounds = {});

  // The series of `name` with these label values (in the declared order), created on first
  // use; nullptr when `name` is not declared as that kind or the values do not fit.
  metric_value* counter(const std::string& name, const std::vector<std::string>& values = {}) {
    return value(name, metric_kind::counter, values);
  }
  metric_value* gauge(const std::string& name, const std::vector<std::string>& values = {}) {
    return value(name, metric_kind::gauge, values);
  }
  histogram_value* histogram(const std::string& name, const std::vector<std::string>& values = {});

  // Every metric in the text exposition format, sorted by name.
  std::string prometheus_text() const;

 private:
  struct family {
    metric_kind kind;
    std::string help;
    std::vector<std::string> label_names;
    std::vector<double> bounds;
    std::map<std::vector<std::string>, std::unique_ptr<metric_value>> values;
    std::map<std::vector<std::string>, std::unique_ptr<histogram_value>> histograms;
  };

  family* find(const std::string& name, metric_kind kind, const std::vector<std::string>& values);
  metric_value* value(const std::string& name, metric_kind kind,
                      const std::vector<std::string>& values);

  mutable std::mutex mutex_;
  std::map<std::string, family> families_;
};

// This process's CPU time (user + system) and resident memory, now.
struct process_usage {
  double cpu_seconds = 0;
  uint64_t rss_bytes = 0;
  uint64_t peak_rss_bytes = 0;  // the most resident memory the process has held so far
};
process_usage current_process_usage();

// Declares and sets process_cpu_seconds_total and process_resident_memory_bytes (the
// standard process metrics) from getrusage and /proc/self/statm; the endpoint calls it before
// each scrape.
void update_process_metrics(metrics_registry& registry);

// The label values of a series as Prometheus writes them: {a="x",b="y"} (empty: "").
std::string render_labels(const std::vector<std::string>& names,
                          const std::vector<std::string>& values);

}  // namespace troupe
