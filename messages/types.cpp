#include "messages/types.hpp"

#include "messages/json.hpp"

namespace troupe {

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
  out["staleness"] = {{"mean", r.mean_staleness},
                      {"p50", r.staleness_p50},
                      {"p99", r.staleness_p99},
                      {"max", r.max_staleness}};
  out["max_clock_gap"] = r.max_clock_gap;
  for (const auto& [name, value] : r.figures) out[name] = value;
  out["restarts"] = r.restarts;
  out["escalations"] = r.escalations;
  out["updates_lost"] = r.updates_lost;
  out["recovery_s"] = r.recovery_s;
  out["checkpoints"] = r.checkpoints;
  out["resumed_from_step"] = r.resumed_from_step;
  out["mode"] = r.mode;
  out["allreduce_bytes"] = r.allreduce_bytes;
  out["allreduce_bytes_inter_host"] = r.allreduce_bytes_inter_host;
  out["allreduce_s"] = r.allreduce_s;
  if (r.mode != "ps") {
    out["allreduce_bytes_by_stage"] = {{"warmup", r.allreduce_bytes_warmup},
                                       {"compressed", r.allreduce_bytes_compressed}};
    out["steps_by_stage"] = {{"warmup", r.steps_warmup}, {"compressed", r.steps_compressed}};
  }
  out["overlap"] = r.overlap;
  out["generations"] = r.generations;
  out["reform_s"] = r.reform_s;
  out["skipped_steps"] = r.skipped_steps;
  out["checksum_mismatches"] = r.checksum_mismatches;
  out["status"] = r.failure.empty() ? "finished" : "failed";
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
                              {"batch_share", w.batch_share}});
  out["epochs"] = json::array();
  for (const auto& e : r.epochs) {
    json epoch = {{"epoch", e.epoch},
                  {"test_accuracy", e.test_accuracy},
                  {"test_loss", e.test_loss},
                  {"train_loss", e.train_loss},
                  {"wall_s", e.wall_s}};
    if (r.mode != "ps") epoch["examples"] = e.examples;
    out["epochs"].push_back(std::move(epoch));
  }
  return to_text(out);
}

}  // namespace troupe
