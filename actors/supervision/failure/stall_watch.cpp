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

std::string describe_stall(stall_watch::clock::duration quiet, stall_watch::clock::duration bound,
                           const std::vector<member_activity>& members) {
  using seconds = std::chrono::duration<double>;
  std::string text = fmt::format("stalled: no progress for {:.0f} s (the bound is {:.0f} s)",
                                 seconds(quiet).count(), seconds(bound).count());
  for (const auto& m : members)
    text += fmt::format("; {}: {}, waiting on {} for {:.0f} s", m.member, m.doing, m.waiting_on,
                        m.since_s);
  if (members.empty()) text += "; no member said what it was doing";
  return text;
}

}  // namespace troupe
