#include "actors/supervision/failure/stall_watch.hpp"

#include <fmt/format.h>

namespace troupe {

std::vector<member_activity> last_activity(const activity_board* local,
                                           const std::vector<heard_activity>& heard,
                                           stall_watch::clock::time_point now) {
  std::vector<member_activity> out;
  if (local) out = local->snapshot();
  for (const auto& beat : heard) {
    const double age = std::chrono::duration<double>(now - beat.at).count();
    for (auto record : beat.records) {
      record.since_s += std::max(0.0, age);
      out.push_back(std::move(record));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const member_activity& a, const member_activity& b) { return a.member < b.member; });
  return out;
}

std::string describe_activity(const std::vector<member_activity>& members) {
  std::string text;
  for (const auto& m : members)
    text += fmt::format("; {}: {}, waiting on {} for {:.0f} s", m.member, m.doing, m.waiting_on,
                        m.since_s);
  return text;
}

std::optional<std::string> judge_stall(stall_watch& watch, bool busy, const activity_board* local,
                                       const std::vector<heard_activity>& heard,
                                       job_report& report) {
  const auto now = stall_watch::clock::now();
  const auto quiet = watch.check(now, busy);
  if (!quiet) return std::nullopt;
  report.stalled = true;
  report.stall = last_activity(local, heard, now);
  using seconds = std::chrono::duration<double>;
  return fmt::format("stalled: no progress for {:.0f} s (the bound is {:.0f} s){}",
                     seconds(*quiet).count(), seconds(watch.bound()).count(),
                     report.stall.empty() ? "; no member said what it was doing"
                                          : describe_activity(report.stall));
}

}  // namespace troupe
