#include "messages/types.hpp"

#include <charconv>

#include "messages/json.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// A port in [1, 65535] from all of `text`.
std::optional<uint16_t> port_of(std::string_view text) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value == 0 || value > 65535)
    return std::nullopt;
  return static_cast<uint16_t>(value);
}

}  // namespace

std::string to_server_list(const std::vector<endpoint>& servers) {
  std::string out;
  for (const auto& e : servers) {
    if (!out.empty()) out += ',';
    out += e.host + ':' + std::to_string(e.port);
    if (e.lane != 0) out += '/' + std::to_string(e.lane);
  }
  return out;
}

caf::expected<std::vector<endpoint>> parse_server_list(const std::string& text) {
  std::vector<endpoint> out;
  std::string_view rest{text};
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const auto entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const auto slash = entry.find('/');
    const auto address = entry.substr(0, slash);
    const auto colon = address.rfind(':');
    endpoint e;
    const auto port =
        colon == std::string_view::npos ? std::nullopt : port_of(address.substr(colon + 1));
    const auto lane = slash == std::string_view::npos ? std::optional<uint16_t>{0}
                                                      : port_of(entry.substr(slash + 1));
    if (colon == 0 || !port || !lane)
      return make_error(errc::malformed_message,
                        "not HOST:PORT[/LANE] in a server list: " + std::string{entry});
    out.push_back(endpoint{std::string{address.substr(0, colon)}, *port, *lane});
  }
  return out;
}

std::string to_text(const json& value, int indent) {
  return value.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string to_json(const job_report& r) {
  json out;
  out["test_accuracy"] = r.test_accuracy;
  out["steps"] = r.steps;
  out["wall_s"] = r.wall_s;
  out["updates_applied"] = r.updates_applied;
  out["updates_rejected"] = r.updates_rejected;
  out["updates_skipped"] = r.updates_skipped;
  out["duplicate_pushes"] = r.duplicate_pushes;
  out["max_staleness"] = r.max_staleness;
  out["mean_staleness"] = r.mean_staleness;
  const bool data_parallel = r.mode == "dp" || r.mode == "hybrid";
  // Counted in updates a bucket applied between a worker's read and its push: in diloco each
  // update is a round.
  out["staleness"] = {{"mean", r.mean_staleness},
                      {"p50", r.staleness_p50},
                      {"p99", r.staleness_p99},
                      {"max", r.max_staleness},
                      {"unit", r.mode == "diloco" ? "rounds" : "updates"}};
  out["max_clock_gap"] = r.max_clock_gap;
  if (!r.tables.empty()) {
    json tables = json::object();
    for (const auto& t : r.tables)
      tables[t.table] = {{"rows", t.rows},
                         {"rows_evicted", t.rows_evicted},
                         {"ids_not_admitted", t.ids_not_admitted},
                         {"grads_dropped", t.grads_dropped}};
    out["tables"] = std::move(tables);
  }
  for (const auto& [name, value] : r.figures) out[name] = value;
  out["restarts"] = r.restarts;
  out["escalations"] = r.escalations;
  out["updates_lost"] = r.updates_lost;
  out["recovery_s"] = r.recovery_s;
  out["checkpoints"] = r.checkpoints;
  out["resumed_from_step"] = r.resumed_from_step;
  out["mode"] = r.mode;
  if (data_parallel) out["zero_stage"] = r.zero_stage;
  if (r.mode == "diloco") {
    out["rounds"] = r.rounds;
    out["pseudo_gradient_bytes"] = r.pseudo_gradient_bytes;
  }
  out["allreduce_bytes"] = r.allreduce_bytes;
  out["allreduce_bytes_inter_host"] = r.allreduce_bytes_inter_host;
  out["allreduce_s"] = r.allreduce_s;
  if (data_parallel) {
    out["allreduce_bytes_by_stage"] = {{"warmup", r.allreduce_bytes_warmup},
                                       {"compressed", r.allreduce_bytes_compressed}};
    out["steps_by_stage"] = {{"warmup", r.steps_warmup}, {"compressed", r.steps_compressed}};
  }
  out["overlap"] = r.overlap;
  out["generations"] = r.generations;
  out["reform_s"] = r.reform_s;
  out["skipped_steps"] = r.skipped_steps;
  out["checksum_mismatches"] = r.checksum_mismatches;
  out["status"] = r.stalled ? "stalled" : r.failure.empty() ? "finished" : "failed";
  if (r.stalled) {
    out["stall"] = json::object();
    for (const auto& a : r.stall)
      out["stall"][a.member] = {
          {"doing", a.doing}, {"waiting_on", a.waiting_on}, {"since_s", a.since_s}};
  }
  out["settings"] = json::object();
  for (const auto& [name, value] : r.settings) out["settings"][name] = value;
  if (!r.failure.empty()) out["failure"] = r.failure;
  out["losses"] = json::array();
  for (const auto& l : r.losses)
    out["losses"].push_back({{"name", l.name},
                             {"role", to_string(l.kind)},
                             {"at_s", l.at_s},
                             {"at_unix_ms", l.at_unix_ms},
                             {"reason", l.reason}});
  out["takeovers"] = json::array();
  for (const auto& t : r.takeovers)
    out["takeovers"].push_back({{"at_s", t.at_s}, {"took_s", t.took_s}, {"term", t.term}});
  out["workers_lost"] = r.workers_lost;
  out["drained"] = r.drained;
  out["workers"] = json::array();
  for (const auto& w : r.workers)
    out["workers"].push_back({{"name", w.name},
                              {"steps", w.steps},
                              {"utilization", w.utilization},
                              {"batch_share", w.batch_share},
                              {"skipped_steps", w.skipped_steps},
                              {"peak_rss_mb", w.peak_rss_mb}});
  out["servers"] = json::array();
  for (const auto& s : r.servers)
    out["servers"].push_back({{"name", s.name}, {"peak_rss_mb", s.peak_rss_mb}});
  out["coordinator_peak_rss_mb"] = r.coordinator_peak_rss_mb;
  out["epochs"] = json::array();
  for (const auto& e : r.epochs) {
    json epoch = {{"epoch", e.epoch},
                  {"test_accuracy", e.test_accuracy},
                  {"test_loss", e.test_loss},
                  {"train_loss", e.train_loss},
                  {"wall_s", e.wall_s}};
    if (data_parallel) epoch["examples"] = e.examples;
    out["epochs"].push_back(std::move(epoch));
  }
  return to_text(out);
}

}  // namespace troupe
