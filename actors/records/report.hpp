// Assembling the job report from what the buckets and workers counted, and writing it. Pure
// functions over value types; the coordinator calls them once at the end of a job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "messages/types.hpp"

namespace troupe {

// The smallest t with at least a fraction q of the counts at or below t (0 for no counts).
double histogram_quantile(const std::vector<uint64_t>& histogram, double q);

// Adds every bucket's counters to `report`: updates applied and rejected, staleness mean,
// p50, p99 and max (from the merged histograms), and the largest clock gap.
void summarize_buckets(const std::vector<bucket_stats>& buckets, job_report& report);

// Counts one step of `who` ("worker-1", "the group"), skipped for a non-finite loss or
// gradient or not, into `in_a_row` and the report's skipped_steps; the reason the job fails
// with once `in_a_row` reaches `limit` (--max-consecutive-skipped-steps; 0: none), or none.
std::optional<std::string> count_skipped_step(bool skipped, const std::string& who,
                                              uint64_t& in_a_row, uint64_t limit,
                                              job_report& report);

// An event of the job's timeline that its report keeps no time of: a checkpoint written, a
// restart, a drain (seconds since training started).
struct timeline_event {
  double at_s = 0;
  std::string event;
  std::string what;
};

// Adds an event to `events`, which keeps the newest 4096.
void note_event(std::vector<timeline_event>& events, double at_s, std::string event,
                std::string what);

// The job's events so far, oldest first: members lost (with why), takeovers by a standby and
// epochs evaluated (from its report), and `events`. Columns t_s, event, what. The console's
// and the dashboard's `timeline` view.
table_view timeline_table(const job_report& report, const std::vector<timeline_event>& events);

// Writes to_json(report), with `settings` (flag_settings of the job's options), to `path`
// atomically (a temporary file, then rename).
caf::error write_report_file(const std::string& path, job_report report,
                             std::vector<std::pair<std::string, std::string>> settings);

}  // namespace troupe
