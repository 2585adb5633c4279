// The console's views of a data-parallel job: the group (generation, members, hosts, steps,
// collective bytes and time, the hidden fraction), the tree of its actors, the nodes, and the
// coordinator's metrics.
#include <fmt/format.h>

#include "actors/dp/plan/dp_coordinator_parts.hpp"
#include "actors/ps/coordinator_parts.hpp"
#include "actors/records/report.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_coordination {

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

table_view tree(const coordinator_state& st, size_t own_mailbox) {
  table_view t{{"actor", "kind", "node", "state", "restarts", "mailbox"}, {}};
  t.rows.push_back({"coordinator", "dp_coordinator", "coordinator",
                    st.shell.finishing()           ? "finishing"
                    : st.shell.started.has_value() ? "training"
                                                   : "joining",
                    "0", std::to_string(own_mailbox)});
  t.rows.push_back({"  group", "generation " + std::to_string(st.dp->generation), "coordinator",
                    std::to_string(live_count(st)) + " members", "-", "-"});
  for (const auto& m : st.dp->members) {
    t.rows.push_back({"    " + m.name, "dp_trainer", m.name, state_of(m), "0", "-"});
    t.rows.push_back(
        {"      " + m.name + " allreduce_group", "allreduce_group", m.name, state_of(m), "0", "-"});
  }
  return t;
}

table_view nodes(const coordinator_state& st) {
  table_view t{{"node", "role", "host", "state", "rank"}, {}};
  t.rows.push_back({"coordinator", "coordinator", "-", "live", "-"});
  for (const auto& m : st.dp->members)
    t.rows.push_back(
        {m.name, "worker", m.host, state_of(m), m.lost ? "-" : std::to_string(m.rank)});
  return t;
}

}  // namespace

caf::result<wire> inspect(self_ptr self, const job_config& config, const std::string& view) {
  const auto& st = self->state;
  if (view == "group") return encode(group(st));
  if (view == "tree") return encode(tree(st, self->mailbox().size()));
  if (view == "nodes") return encode(nodes(st));
  if (view == "timeline") return encode(timeline_table(st.shell.report, st.shell.timeline));
  if (view == "metrics")
    return encode(
        coordination::metrics_table({{"coordinator", node_metrics_text(config.metrics)}}));
  return make_error(
      errc::bad_configuration,
      "no view '" + view + "' in a data-parallel job (group, tree, nodes, metrics, timeline)");
}

}  // namespace troupe::dp_coordination
