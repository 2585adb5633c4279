// The data-parallel plan's part of the console: its members (the shell's nodes), its rows of
// the supervision tree (the group, each member's trainer and allreduce group), its own view
// `group` (generation, members, hosts, steps, collective bytes and time, the hidden fraction),
// and a checkpoint now (member 0 saves after its next step).
#include <fmt/format.h>

#include "actors/dp/plan/dp_plan_parts.hpp"
#include "actors/records/report.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_plan {

namespace {

std::string state_of(const dp_member& m) {
  return m.lost ? "lost" : m.done ? "done" : "live";
}

table_view group(const coordinator_state& st) {
  const auto& r = st.shell.report;
  const double hidden =
      r.allreduce_s > 0 ? std::clamp(1.0 - st.dp->exposed_s / r.allreduce_s, 0.0, 1.0) : 0.0;
  table_view t{{"member", "rank", "host", "state", "steps", "generation", "job_step",
                "allreduce_mb", "inter_host_mb", "allreduce_s", "hidden"},
               {}};
  for (const auto& m : st.dp->members)
    t.rows.push_back({m.name, m.lost ? "-" : std::to_string(m.rank), m.host, state_of(m),
                      std::to_string(m.steps), std::to_string(st.dp->generation),
                      std::to_string(st.dp->steps),
                      fmt::format("{:.1f}", double(r.allreduce_bytes) / 1e6),
                      fmt::format("{:.1f}", double(r.allreduce_bytes_inter_host) / 1e6),
                      fmt::format("{:.2f}", r.allreduce_s), fmt::format("{:.2f}", hidden)});
  return t;
}

}  // namespace

}  // namespace troupe::dp_plan

namespace troupe {

void dp_state::cards(std::vector<member_card>& out) const {
  for (const auto& m : members)  // (a member's node metrics are its own process's)
    out.push_back(m.presence.card("worker", m.name, m.host, m.lost, dp_plan::state_of(m),
                                  caf::actor_cast<caf::actor>(m.handle), false));
}

void dp_state::tree_rows(const actor_values&, table_view& t) const {
  const auto live =
      std::count_if(members.begin(), members.end(), [](const dp_member& m) { return !m.lost; });
  t.rows.push_back({"  group", "generation " + std::to_string(generation), "coordinator",
                    std::to_string(live) + (live == 1 ? " member" : " members"), "-", "-"});
  for (const auto& m : members) {
    const auto state = dp_plan::state_of(m);
    t.rows.push_back({"    " + m.name, "dp_trainer", m.name, state, "0", "-"});
    t.rows.push_back(
        {"      " + m.name + " allreduce_group", "allreduce_group", m.name, state, "0", "-"});
  }
}

std::vector<std::string> dp_state::views() const {
  return {"group"};
}

caf::result<wire> dp_state::view(coordinator_self self, const job_config&, const std::string&) {
  return encode(dp_plan::group(self->state));
}

// Member 0 saves its state after its next step that communicates; the promise waits for the
// file (or the job's end).
caf::result<std::string> dp_state::checkpoint_now(coordinator_self self, const job_config&) {
  auto first = std::find_if(members.begin(), members.end(),
                            [](const dp_member& m) { return !m.lost && m.rank == 0; });
  if (first == members.end() || lost_at)
    return make_error(errc::job_failed, "the group is forming again; try again in a moment");
  self->send(first->handle, save_atom_v);
  return next_checkpoint(self);
}

}  // namespace troupe
