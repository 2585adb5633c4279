// The coordinator's answers to the console: tables of the nodes, the workers and the buckets
// of the running job, built from what the coordinator tracks (and, for buckets, their stats).
#include <fmt/format.h>

#include "actors/coordinator_parts.hpp"
#include "actors/report.hpp"
#include "troupe/error.hpp"
#include "troupe/metrics.hpp"

namespace troupe::coordination {

namespace {

using clock = std::chrono::steady_clock;

std::string fixed(double x, int digits = 2) {
  return fmt::format("{:.{}f}", x, digits);
}

std::string state_of(const member& m) {
  return m.lost ? "lost" : m.done ? "done" : "live";
}

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

table_view nodes(const coordinator_state& st, const coordinator_config& config) {
  table_view t{
      {"role", "name", "address", "state", "uptime_s", "heartbeat_age_ms", "cpu_s", "rss_mb"}, {}};
  const auto now = clock::now();
  const auto usage = current_process_usage();
  t.rows.push_back({"coordinator", "coordinator", to_string(config.opts.listen),
                    phase_name(st.phase), fixed(seconds_since(st.created), 1), "-",
                    fixed(usage.cpu_seconds), fixed(double(usage.rss_bytes) / 1048576.0, 1)});
  auto add = [&](const member& m, const char* kind) {
    const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - m.heard).count();
    t.rows.push_back(
        {kind, m.name, m.data.port ? m.data.host + ":" + std::to_string(m.data.port) : "-",
         state_of(m), fixed(seconds_since(m.joined), 1), m.cpu_s > 0 ? std::to_string(age) : "-",
         fixed(m.cpu_s), fixed(double(m.rss) / 1048576.0, 1)});
  };
  for (const auto& m : st.server_members) add(m, "server");
  for (const auto& m : st.worker_members) add(m, "worker");
  return t;
}

table_view workers(const coordinator_state& st) {
  table_view t{{"name", "rank", "state", "steps", "steps_per_s", "utilization", "last_loss"}, {}};
  for (size_t r = 0; r < st.worker_members.size(); ++r) {
    const auto& m = st.worker_members[r];
    t.rows.push_back({m.name, std::to_string(r), state_of(m), std::to_string(m.steps),
                      fixed(m.wall_s > 0 ? double(m.steps) / m.wall_s : 0.0, 1),
                      fixed(m.wall_s > 0 ? m.compute_s / m.wall_s : 0.0), fixed(m.last_loss, 4)});
  }
  return t;
}

// The supervision tree: the coordinator, each node's supervisor, and what it supervises.
table_view tree(const coordinator_state& st) {
  table_view t{{"actor", "kind", "node", "state", "restarts"}, {}};
  t.rows.push_back({"coordinator", "coordinator", "coordinator", phase_name(st.phase), "0"});
  for (size_t s = 0; s < st.server_members.size(); ++s) {
    const auto& m = st.server_members[s];
    const std::string state = m.lost ? "lost" : "live";
    t.rows.push_back({"  " + m.name + " supervisor", "supervisor", m.name, state, "-"});
    for (uint32_t b = 0; b < st.homes.size(); ++b) {
      const auto& home = st.homes[b];
      const bool primary = home.primary_server == s;
      const bool backup = home.backup && home.backup_server == s;
      if (!primary && !backup) continue;
      t.rows.push_back({"    bucket-" + std::to_string(b), primary ? "bucket" : "backup", m.name,
                        m.lost            ? "lost"
                        : home.recovering ? "recovering"
                                          : "live",
                        std::to_string(primary ? home.primary_restarts : home.backup_restarts)});
    }
  }
  for (size_t w = 0; w < st.worker_members.size(); ++w) {
    const auto& m = st.worker_members[w];
    const bool seen_before = std::any_of(st.worker_members.begin(), st.worker_members.begin() + w,
                                         [&](const member& o) { return o.name == m.name; });
    if (seen_before) continue;  // one line per worker node, its latest incarnation below
    size_t lives = 0;
    const member* latest = &m;
    for (const auto& o : st.worker_members)
      if (o.name == m.name) ++lives, latest = &o;
    t.rows.push_back(
        {"  " + m.name + " supervisor", "supervisor", m.name, latest->lost ? "lost" : "live", "-"});
    t.rows.push_back(
        {"    " + m.name, "worker", m.name, state_of(*latest), std::to_string(lives - 1)});
  }
  return t;
}

std::vector<std::string> bucket_row(const coordinator_state& st, const bucket_stats& s) {
  const auto& home = st.homes[s.bucket];
  std::string clock_text;
  for (uint64_t v : s.clock.entries())
    clock_text += (clock_text.empty() ? "" : " ") + std::to_string(v);
  return {std::to_string(s.bucket),
          st.server_members[home.primary_server].name,
          home.backup ? st.server_members[home.backup_server].name : "-",
          std::to_string(s.version),
          std::to_string(s.updates_applied),
          std::to_string(s.updates_rejected),
          fixed(histogram_quantile(s.staleness_histogram, 0.5), 0),
          fixed(histogram_quantile(s.staleness_histogram, 0.99), 0),
          std::to_string(s.max_staleness),
          clock_text,
          std::to_string(s.clock.sum())};
}

}  // namespace

caf::result<wire> inspect(self_ptr self, const coordinator_config& config,
                          const std::string& view) {
  auto& st = self->state;
  if (view == "nodes") return encode(nodes(st, config));
  if (view == "workers") return encode(workers(st));
  if (view == "tree") return encode(tree(st));
  if (view != "buckets")
    return make_error(errc::bad_configuration,
                      "no view '" + view + "' (nodes, tree, workers, buckets)");
  if (st.phase != job_phase::training)
    return make_error(errc::job_failed, "no buckets to show before training starts");
  auto table = std::make_shared<table_view>(
      table_view{{"bucket", "primary", "backup", "version", "applied", "rejected", "staleness_p50",
                  "staleness_p99", "staleness_max", "clock", "clock_sum"},
                 std::vector<std::vector<std::string>>(st.buckets.size())});
  auto promise = self->make_response_promise<wire>();
  auto pending = std::make_shared<size_t>(st.buckets.size());
  for (uint32_t b = 0; b < st.buckets.size(); ++b)
    self->request(st.buckets[b], config.opts.request_timeout, stats_atom_v)
        .then(
            [=](const wire& w) mutable {
              if (auto s = decode<bucket_stats>(w); s && s->bucket < table->rows.size())
                table->rows[s->bucket] = bucket_row(self->state, *s);
              if (--*pending == 0) promise.deliver(encode(*table));
            },
            [=](caf::error&) mutable {
              table->rows[b] = std::vector<std::string>(table->columns.size(), "?");
              table->rows[b][0] = std::to_string(b);
              if (--*pending == 0) promise.deliver(encode(*table));
            });
  return promise;
}

}  // namespace troupe::coordination
