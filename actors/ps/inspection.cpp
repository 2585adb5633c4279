// The coordinator's answers to the console: tables of the nodes, the supervision tree, the
// workers, the buckets, every node's metrics, the diagnostics and the training curve, built
// from what the coordinator tracks and what it asks the nodes and buckets at that moment.
#include <fmt/format.h>

#include "actors/ps/coordinator_parts.hpp"
#include "actors/records/report.hpp"
#include "troupe/error.hpp"
#include "troupe/metrics.hpp"
#include "troupe/metrics_text.hpp"

namespace troupe::coordination {

std::string fixed(double x, int digits) {
  return fmt::format("{:.{}f}", x, digits);
}

std::string state_of(const member& m) {
  return m.drained ? "drained" : m.lost ? "lost" : m.done ? "done" : "live";
}

namespace {

using clock = std::chrono::steady_clock;

std::string phase_name(job_phase p) {
  switch (p) {
    case job_phase::joining:
      return "joining";
    case job_phase::placing:
      return "placing";
    case job_phase::training:
      return "training";
    case job_phase::finishing:
      return "finishing";
  }
  return "unknown";
}

table_view nodes(const coordinator_state& st, const job_config& config) {
  table_view t{
      {"role", "name", "address", "state", "uptime_s", "heartbeat_age_ms", "cpu_s", "rss_mb"}, {}};
  const auto now = clock::now();
  const auto usage = current_process_usage();
  t.rows.push_back({"coordinator", "coordinator", to_string(config.opts.listen),
                    phase_name(st.shell.phase), fixed(seconds_since(st.shell.created), 1), "-",
                    fixed(usage.cpu_seconds), fixed(double(usage.rss_bytes) / 1048576.0, 1)});
  auto add = [&](const member& m, const char* kind) {
    const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - m.heard).count();
    t.rows.push_back(
        {kind, m.name, m.data.port ? m.data.host + ":" + std::to_string(m.data.port) : "-",
         state_of(m), fixed(seconds_since(m.joined), 1), m.cpu_s > 0 ? std::to_string(age) : "-",
         fixed(m.cpu_s), fixed(double(m.rss) / 1048576.0, 1)});
  };
  for (const auto& m : st.ps->roster.server_members) add(m, "server");
  for (const auto& m : st.ps->roster.worker_members) add(m, "worker");
  return t;
}

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

// One per-actor metric of every node, e.g. mailbox sizes: (node, actor) -> value.
using actor_values = std::map<std::pair<std::string, std::string>, std::string>;

actor_values per_actor(const node_texts& texts, const std::string& metric) {
  actor_values out;
  for (const auto& [node, text] : texts)
    for (const auto& s : parse_prometheus_text(text))
      if (s.name == metric && s.labels.rfind("actor=\"", 0) == 0)
        out[{node, s.labels.substr(7, s.labels.size() - 8)}] = s.value;
  return out;
}

// `actor`'s value on node `m` (or in the coordinator's process, whose nodes share its
// metrics); "-" when it is gone or has none.
std::string value_of(const actor_values& values, const member& m, const std::string& actor) {
  if (m.lost) return "-";
  auto it = values.find({m.name, actor});
  if (it == values.end()) it = values.find({"coordinator", actor});
  return it == values.end() ? "-" : it->second;
}

// The supervision tree: the coordinator, each node's supervisor, and what it supervises.
table_view tree(const coordinator_state& st, size_t own_mailbox, const actor_values& boxes) {
  table_view t{{"actor", "kind", "node", "state", "restarts", "mailbox"}, {}};
  auto mailbox = [&](const member& m, const std::string& actor) {
    return value_of(boxes, m, actor);
  };
  t.rows.push_back({"coordinator", "coordinator", "coordinator", phase_name(st.shell.phase), "0",
                    std::to_string(own_mailbox)});
  for (size_t s = 0; s < st.ps->roster.server_members.size(); ++s) {
    const auto& m = st.ps->roster.server_members[s];
    t.rows.push_back({"  " + m.name + " supervisor", "supervisor", m.name, state_of(m), "-", "-"});
    for (uint32_t b = 0; b < st.ps->directory.homes.size(); ++b) {
      const auto& home = st.ps->directory.homes[b];
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
           mailbox(m, actor)});
    }
  }
  for (size_t w = 0; w < st.ps->roster.worker_members.size(); ++w) {
    const auto& m = st.ps->roster.worker_members[w];
    const bool seen_before =
        std::any_of(st.ps->roster.worker_members.begin(), st.ps->roster.worker_members.begin() + w,
                    [&](const member& o) { return o.name == m.name; });
    if (seen_before) continue;  // one line per worker node, its latest incarnation below
    size_t lives = 0;
    const member* latest = &m;
    for (const auto& o : st.ps->roster.worker_members)
      if (o.name == m.name) ++lives, latest = &o;
    t.rows.push_back({"  " + m.name + " supervisor", "supervisor", m.name,
                      latest->drained ? "drained"
                      : latest->lost  ? "lost"
                                      : "live",
                      "-", "-"});
    t.rows.push_back({"    " + m.name, "worker", m.name, state_of(*latest),
                      std::to_string(lives - 1), mailbox(*latest, m.name)});
  }
  return t;
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

}  // namespace

caf::result<wire> inspect(self_ptr self, const job_config& config, const std::string& view) {
  auto& st = self->state;
  if (view == "nodes") return encode(nodes(st, config));
  if (view == "workers") return encode(workers(st));
  if (view == "curve") return encode(st.shell.curve.table());
  if (view == "timeline") return encode(timeline_table(st.shell.report, st.shell.timeline));
  if (view != "tree" && view != "metrics" && view != "buckets" && view != "diag")
    return make_error(
        errc::bad_configuration,
        "no view '" + view + "' (nodes, tree, workers, buckets, metrics, diag, curve, timeline)");
  if ((view == "buckets" || view == "diag") && st.shell.phase != job_phase::training)
    return make_error(errc::job_failed, "no buckets to show before training starts");
  // (Only now: a promise made takes the request's answer over, and an error returned after it
  // would never reach the asker.)
  auto promise = self->make_response_promise<wire>();
  if (view == "tree" || view == "metrics") {
    gather_metrics(self, config, [=](node_texts texts) mutable {
      if (view == "metrics") {
        promise.deliver(encode(metrics_table(texts)));
        return;
      }
      const auto own = self->mailbox().size();
      promise.deliver(
          encode(tree(self->state, own, per_actor(texts, "troupe_actor_mailbox_size"))));
    });
    return promise;
  }
  gather_stats(self, config, [=](std::vector<std::optional<bucket_stats>> stats) mutable {
    if (view == "diag") {
      promise.deliver(encode(diagnose(self->state, config.opts.warn, stats)));
      return;
    }
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

}  // namespace troupe::coordination
