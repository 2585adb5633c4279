// The parameter service plan's part of the console: its members (the shell's nodes and
// metrics), its rows of the supervision tree (each server's buckets and backups, each worker),
// and its own views: the workers, the buckets and the diagnostics, built from what it tracks
// and what it asks the nodes and buckets at that moment.
#include <fmt/format.h>

#include "actors/ps/ps_plan_parts.hpp"
#include "actors/records/report.hpp"
#include "troupe/error.hpp"
#include "troupe/metrics.hpp"
#include "troupe/metrics_text.hpp"

namespace troupe::ps_plan {

std::string state_of(const member& m) {
  return m.drained ? "drained" : m.lost ? "lost" : m.done ? "done" : "live";
}

namespace {

table_view workers(const coordinator_state& st) {
  table_view t{
      {"name", "rank", "state", "clock", "steps", "steps_per_s", "utilization", "last_loss"}, {}};
  for (size_t r = 0; r < st.ps->roster.worker_members.size(); ++r) {
    const auto& m = st.ps->roster.worker_members[r];
    t.rows.push_back({m.name, std::to_string(r), state_of(m), std::to_string(m.clock),
                      std::to_string(m.steps),
                      fixed(m.wall_s > 0 ? double(m.steps) / m.wall_s : 0.0, 1),
                      fixed(m.wall_s > 0 ? m.compute_s / m.wall_s : 0.0), fixed(m.last_loss, 4)});
  }
  return t;
}

// `actor`'s value on member `m`'s node; "-" once it is lost.
std::string value_of(const actor_values& values, const member& m, const std::string& actor) {
  return m.lost ? "-" : troupe::value_of(values, m.name, actor);
}

// The servers of a bucket's backups in chain order ("-" for none).
std::string backup_names(const coordinator_state& st, const bucket_home& home) {
  std::string names;
  for (const auto& c : home.backups)
    names += (names.empty() ? "" : ",") + st.ps->roster.server_members[c.server].name;
  return names.empty() ? "-" : names;
}

std::vector<std::string> bucket_row(const coordinator_state& st, const bucket_stats& s,
                                    const actor_values& bytes_in, const actor_values& bytes_out) {
  const auto& home = st.ps->directory.homes[s.bucket];
  const auto& primary = st.ps->roster.server_members[home.primary_server];
  const std::string actor = fmt::format("bucket-{}", s.bucket);
  const std::string clock_text = fmt::format("{}", fmt::join(s.clock.entries(), " "));
  return {std::to_string(s.bucket),
          st.ps->roster.server_members[home.primary_server].name,
          backup_names(st, home),
          std::to_string(s.version),
          std::to_string(s.updates_applied),
          std::to_string(s.updates_rejected),
          std::to_string(s.duplicate_pushes),
          fixed(histogram_quantile(s.staleness_histogram, 0.5), 0),
          fixed(histogram_quantile(s.staleness_histogram, 0.99), 0),
          std::to_string(s.max_staleness),
          clock_text,
          std::to_string(s.clock.sum()),
          value_of(bytes_in, primary, actor),
          value_of(bytes_out, primary, actor)};
}

caf::result<wire> buckets_view(self_ptr self, const job_config& config) {
  auto promise = self->make_response_promise<wire>();
  gather_stats(self, config, [=](std::vector<std::optional<bucket_stats>> stats) mutable {
    gather_metrics(self, config, [=](node_texts texts) mutable {  // bytes in and out
      table_view table{{"bucket", "primary", "backup", "version", "applied", "rejected",
                        "duplicates", "staleness_p50", "staleness_p99", "staleness_max", "clock",
                        "clock_sum", "bytes_in", "bytes_out"},
                       {}};
      const auto bytes_in = per_actor(texts, "troupe_bytes_received_total");
      const auto bytes_out = per_actor(texts, "troupe_bytes_sent_total");
      for (uint32_t b = 0; b < stats.size(); ++b) {
        if (stats[b]) {
          table.rows.push_back(bucket_row(self->state, *stats[b], bytes_in, bytes_out));
          continue;
        }
        table.rows.emplace_back(table.columns.size(), "?");
        table.rows.back()[0] = std::to_string(b);
      }
      promise.deliver(encode(table));
    });
  });
  return promise;
}

caf::result<wire> diag_view(self_ptr self, const job_config& config) {
  auto promise = self->make_response_promise<wire>();
  gather_stats(self, config, [=](std::vector<std::optional<bucket_stats>> stats) mutable {
    promise.deliver(encode(diagnose(self->state, config.opts.warn, stats)));
  });
  return promise;
}

}  // namespace

}  // namespace troupe::ps_plan

namespace troupe {

void ps_state::cards(std::vector<member_card>& out) const {
  auto add = [&](const member& m, const char* kind, const caf::actor& handle) {
    const auto address = m.data.port ? m.data.host + ":" + std::to_string(m.data.port) : "-";
    out.push_back(
        m.presence.card(kind, m.name, address, m.lost, ps_plan::state_of(m), handle, true));
  };
  for (size_t i = 0; i < roster.server_members.size(); ++i)
    add(roster.server_members[i], "server", caf::actor_cast<caf::actor>(roster.servers[i]));
  for (size_t i = 0; i < roster.worker_members.size(); ++i)
    add(roster.worker_members[i], "worker", caf::actor_cast<caf::actor>(roster.workers[i]));
}

// Each server's supervisor with the buckets and backups it holds, then each worker node's
// supervisor with its latest worker.
void ps_state::tree_rows(const actor_values& boxes, table_view& t) const {
  const auto& servers = roster.server_members;
  const auto& workers = roster.worker_members;
  for (size_t s = 0; s < servers.size(); ++s) {
    const auto& m = servers[s];
    t.rows.push_back(
        {"  " + m.name + " supervisor", "supervisor", m.name, ps_plan::state_of(m), "-", "-"});
    for (uint32_t b = 0; b < directory.homes.size(); ++b) {
      const auto& home = directory.homes[b];
      const bool primary = home.primary_server == s;
      const auto backup = home.backup_on(static_cast<uint32_t>(s));
      if (!primary && !backup) continue;
      const std::string actor = "bucket-" + std::to_string(b);
      t.rows.push_back(
          {"    " + actor, primary ? "bucket" : "backup", m.name,
           m.lost            ? "lost"
           : home.recovering ? "recovering"
                             : "live",
           std::to_string(primary ? home.primary_restarts : home.backups[*backup].restarts),
           ps_plan::value_of(boxes, m, actor)});
    }
  }
  for (size_t w = 0; w < workers.size(); ++w) {
    const auto& m = workers[w];
    const bool seen_before = std::any_of(workers.begin(), workers.begin() + w,
                                         [&](const member& o) { return o.name == m.name; });
    if (seen_before) continue;  // one line per worker node, its latest incarnation below
    size_t lives = 0;
    const member* latest = &m;
    for (const auto& o : workers)
      if (o.name == m.name) ++lives, latest = &o;
    t.rows.push_back({"  " + m.name + " supervisor", "supervisor", m.name,
                      latest->drained ? "drained"
                      : latest->lost  ? "lost"
                                      : "live",
                      "-", "-"});
    t.rows.push_back({"    " + m.name, "worker", m.name, ps_plan::state_of(*latest),
                      std::to_string(lives - 1), ps_plan::value_of(boxes, *latest, m.name)});
  }
}

std::vector<std::string> ps_state::views() const {
  return {"workers", "buckets", "diag"};
}

caf::result<wire> ps_state::view(coordinator_self self, const job_config& config,
                                 const std::string& name) {
  if (name == "workers") return encode(ps_plan::workers(self->state));
  if (self->state.shell.phase != job_phase::training)
    return make_error(errc::job_failed, "no buckets to show before training starts");
  return name == "buckets" ? ps_plan::buckets_view(self, config) : ps_plan::diag_view(self, config);
}

}  // namespace troupe
