// The shell's answers to the console, whatever the job's mode: the nodes, the supervision tree,
// every node's metrics, the timeline and the training curve, with each plan's members and its
// own views (a parameter service's workers, buckets and diagnostics; a group's members); and
// the operators' actions: the log level of one node or all, a checkpoint now (by the plan that
// trains), and each plan's own (a parameter service's drain and fault injection).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "actors/job/coordinator_state.hpp"
#include "messages/codec.hpp"
#include "troupe/error.hpp"
#include "troupe/metrics.hpp"
#include "troupe/metrics_text.hpp"

namespace troupe {

std::vector<member_card> member_cards(const coordinator_state& st) {
  std::vector<member_card> out;
  for (auto* plan : st.plans()) plan->cards(out);
  return out;
}

std::string fixed(double x, int digits) {
  return fmt::format("{:.{}f}", x, digits);
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
  for (const auto& c : member_cards(st)) {
    const auto age =
        c.heard ? std::to_string(
                      std::chrono::duration_cast<std::chrono::milliseconds>(now - *c.heard).count())
                : std::string{"-"};
    t.rows.push_back({c.role, c.name, c.address, c.state, fixed(c.uptime_s, 1), age, fixed(c.cpu_s),
                      fixed(double(c.rss) / 1048576.0, 1)});
  }
  return t;
}

table_view tree(const coordinator_state& st, size_t own_mailbox, const actor_values& boxes) {
  table_view t{{"actor", "kind", "node", "state", "restarts", "mailbox"}, {}};
  t.rows.push_back({"coordinator", "coordinator", "coordinator", phase_name(st.shell.phase), "0",
                    std::to_string(own_mailbox)});
  for (auto* plan : st.plans()) plan->tree_rows(boxes, t);
  return t;
}

// Every node's metrics as rows: node, family, type, help, metric, labels, value.
table_view metrics_table(const node_texts& texts) {
  table_view t{{"node", "family", "type", "help", "metric", "labels", "value"}, {}};
  for (const auto& [node, text] : texts)
    for (auto& s : parse_prometheus_text(text))
      t.rows.push_back({node, s.family, s.type, s.help, s.name, s.labels, s.value});
  return t;
}

std::string view_names(const coordinator_state& st) {
  std::vector<std::string> names{"nodes", "tree", "metrics", "timeline", "curve"};
  for (auto* plan : st.plans())
    for (auto& v : plan->views()) names.push_back(std::move(v));
  return fmt::format("{}", fmt::join(names, ", "));
}

caf::result<std::string> set_log_level(coordinator_self self, const job_config& config,
                                       const std::string& level, const std::string& node) {
  log_level to;
  if (!parse_log_level(level, to))
    return make_error(errc::bad_configuration,
                      "no log level '" + level + "' (error, warn, info, debug)");
  size_t told = 0;
  if (node.empty() || node == "coordinator") {
    config.log.set_level(to);
    ++told;
  }
  for (const auto& c : member_cards(self->state))
    if (c.handle && (node.empty() || c.name == node)) {
      // (a request: a statically typed sender cannot send() to a handle of any type)
      self->request(c.handle, console_wait(config), log_atom_v, level)
          .then([] {}, [](caf::error&) {});
      ++told;
    }
  if (told == 0)
    return make_error(errc::bad_configuration, "no live node named '" + node + "' (see `nodes`)");
  config.log.info("log level {} on {} node(s)", level, told);
  return fmt::format("log level {} on {} node{}", level, told, told == 1 ? "" : "s");
}

caf::result<std::string> checkpoint_now(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  if (config.opts.checkpoint_dir.empty())
    return make_error(errc::bad_configuration,
                      "this job writes no checkpoints (start the coordinator with "
                      "--checkpoint-dir DIR)");
  if (st.shell.phase != job_phase::training || !st.shell.started)
    return make_error(errc::job_failed, "checkpoints are taken while the job trains");
  return st.trainer()->checkpoint_now(self, config);
}

}  // namespace

caf::result<std::string> next_checkpoint(coordinator_self self) {
  auto promise = self->make_response_promise<std::string>();
  self->state.shell.checkpoints.waiters.push_back(
      [promise](caf::expected<std::string> path) mutable {
        if (path)
          promise.deliver(std::move(*path));
        else
          promise.deliver(std::move(path.error()));
      });
  return promise;
}

std::chrono::seconds console_wait(const job_config& config) {
  return std::min(config.opts.request_timeout, std::chrono::seconds(5));
}

void gather_metrics(coordinator_self self, const job_config& config,
                    std::function<void(node_texts)> done) {
  auto texts = std::make_shared<node_texts>();
  texts->emplace_back("coordinator", node_metrics_text(config.metrics));
  auto pending = std::make_shared<size_t>(1);  // held until every request is out
  auto answered = [=] {
    if (--*pending == 0) done(std::move(*texts));
  };
  for (const auto& c : member_cards(self->state)) {
    // A lost member has none; one in this process shares the coordinator's.
    if (!c.handle || !c.has_metrics || c.handle.node() == self->node()) continue;
    ++*pending;
    self->request(c.handle, console_wait(config), metrics_atom_v)
        .then(
            [=, name = c.name](const std::string& text) {
              texts->emplace_back(name, text);
              answered();
            },
            [=, name = c.name](caf::error& err) {
              config.log.warn("no metrics from '{}': {}", name, describe(err));
              answered();
            });
  }
  answered();
}

actor_values per_actor(const node_texts& texts, const std::string& metric) {
  actor_values out;
  for (const auto& [node, text] : texts)
    for (const auto& s : parse_prometheus_text(text))
      if (s.name == metric && s.labels.rfind("actor=\"", 0) == 0)
        out[{node, s.labels.substr(7, s.labels.size() - 8)}] = s.value;
  return out;
}

std::string value_of(const actor_values& values, const std::string& node,
                     const std::string& actor) {
  auto it = values.find({node, actor});
  if (it == values.end()) it = values.find({"coordinator", actor});
  return it == values.end() ? "-" : it->second;
}

caf::result<wire> inspect_job(coordinator_self self, const job_config& config,
                              const std::string& view) {
  auto& st = self->state;
  if (view == "nodes") return encode(nodes(st, config));
  if (view == "curve") return encode(st.shell.curve.table());
  if (view == "timeline") return encode(timeline_table(st.shell.report, st.shell.timeline));
  if (view != "tree" && view != "metrics") {
    for (auto* plan : st.plans()) {
      const auto own = plan->views();
      if (std::find(own.begin(), own.end(), view) != own.end())
        return plan->view(self, config, view);
    }
    return make_error(errc::bad_configuration,
                      "no view '" + view + "' in this job (" + view_names(st) + ")");
  }
  // (Only now: a promise made takes the request's answer over, and an error returned after it
  // would never reach the asker.)
  auto promise = self->make_response_promise<wire>();
  gather_metrics(self, config, [=](node_texts texts) mutable {
    if (view == "metrics") {
      promise.deliver(encode(metrics_table(texts)));
      return;
    }
    const auto own = self->mailbox().size();
    promise.deliver(encode(tree(self->state, own, per_actor(texts, "troupe_actor_mailbox_size"))));
  });
  return promise;
}

caf::result<std::string> operate_job(coordinator_self self, const job_config& config,
                                     const std::vector<std::string>& action) {
  const std::string& verb = action.front();
  auto word = [&](size_t i) { return i < action.size() ? action[i] : std::string{}; };
  config.log.info("operator action: {}", fmt::join(action, " "));
  if (verb == "log") return set_log_level(self, config, word(1), word(2));
  if (verb == "checkpoint") return checkpoint_now(self, config);
  std::vector<std::string> verbs{"log", "checkpoint"};
  for (auto* plan : self->state.plans())
    for (const auto& v : plan->actions()) {
      if (v == verb) return plan->operate(self, config, action);
      verbs.push_back(v);
    }
  return make_error(errc::bad_configuration,
                    fmt::format("this job takes no operator action '{}' (it takes {})", verb,
                                fmt::join(verbs, ", ")));
}

}  // namespace troupe
