#include "actors/records/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "troupe/error.hpp"

namespace troupe {

double histogram_quantile(const std::vector<uint64_t>& histogram, double q) {
  uint64_t total = 0;
  for (uint64_t n : histogram) total += n;
  if (total == 0) return 0.0;
  const double wanted = q * static_cast<double>(total);
  uint64_t seen = 0;
  for (size_t t = 0; t < histogram.size(); ++t) {
    seen += histogram[t];
    if (static_cast<double>(seen) >= wanted) return static_cast<double>(t);
  }
  return static_cast<double>(histogram.size() - 1);
}

void summarize_buckets(const std::vector<bucket_stats>& buckets, job_report& report) {
  std::vector<uint64_t> merged;
  uint64_t staleness_sum = 0;
  for (const auto& s : buckets) {
    report.updates_applied += s.updates_applied;
    report.updates_rejected += s.updates_rejected;
    report.updates_skipped += s.updates_skipped;
    report.duplicate_pushes += s.duplicate_pushes;
    report.max_staleness = std::max(report.max_staleness, s.max_staleness);
    report.max_clock_gap = std::max(report.max_clock_gap, s.max_clock_gap);
    staleness_sum += s.staleness_sum;
    if (merged.size() < s.staleness_histogram.size()) merged.resize(s.staleness_histogram.size());
    for (size_t t = 0; t < s.staleness_histogram.size(); ++t) merged[t] += s.staleness_histogram[t];
    for (const auto& t : s.tables) {
      auto at = std::find_if(report.tables.begin(), report.tables.end(),
                             [&](const table_counters& c) { return c.table == t.table; });
      if (at == report.tables.end()) at = report.tables.insert(at, table_counters{t.table});
      at->rows += t.rows;
      at->rows_evicted += t.rows_evicted;
      at->ids_not_admitted += t.ids_not_admitted;
      at->grads_dropped += t.grads_dropped;
    }
  }
  report.mean_staleness =
      report.updates_applied ? double(staleness_sum) / double(report.updates_applied) : 0.0;
  report.staleness_p50 = histogram_quantile(merged, 0.50);
  report.staleness_p99 = histogram_quantile(merged, 0.99);
}

caf::error write_report_file(const std::string& path, job_report report,
                             std::vector<std::pair<std::string, std::string>> settings) {
  report.settings = std::move(settings);
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << to_json(report);
  out.close();  // a write error may only show when the buffer is flushed
  if (!out) {
    std::remove(tmp.c_str());
    return make_error(errc::io_failure, "cannot write the report to " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error(errc::io_failure, "cannot move the report to " + path);
  }
  return {};
}

std::optional<std::string> count_skipped_step(bool skipped, const std::string& who,
                                              uint64_t& in_a_row, uint64_t limit,
                                              job_report& report) {
  if (!skipped) {
    in_a_row = 0;
    return std::nullopt;
  }
  ++in_a_row;
  ++report.skipped_steps;
  if (limit == 0 || in_a_row < limit) return std::nullopt;
  return fmt::format(
      "{} skipped {} steps in a row (a non-finite loss or gradient; "
      "--max-consecutive-skipped-steps {})",
      who, in_a_row, limit);
}

void note_event(std::vector<timeline_event>& events, double at_s, std::string event,
                std::string what) {
  if (events.size() >= 4096) events.erase(events.begin());
  events.push_back(timeline_event{at_s, std::move(event), std::move(what)});
}

table_view timeline_table(const job_report& report, const std::vector<timeline_event>& noted) {
  std::vector<std::pair<double, std::vector<std::string>>> events;
  for (const auto& l : report.losses)
    events.push_back(
        {l.at_s, {"lost", fmt::format("{} {}: {}", to_string(l.kind), l.name, l.reason)}});
  for (const auto& t : report.takeovers)
    events.push_back(
        {t.at_s,
         {"takeover", fmt::format("term {}, the standby took {:.2f} s", t.term, t.took_s)}});
  for (const auto& e : report.epochs)
    events.push_back(
        {e.wall_s,
         {"epoch", fmt::format("epoch {}: test accuracy {:.4f}", e.epoch, e.test_accuracy)}});
  for (const auto& e : noted) events.push_back({e.at_s, {e.event, e.what}});
  std::stable_sort(events.begin(), events.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  table_view t{{"t_s", "event", "what"}, {}};
  for (auto& [at, row] : events)
    t.rows.push_back({fmt::format("{:.2f}", at), std::move(row[0]), std::move(row[1])});
  return t;
}

}  // namespace troupe
