#include "messages/types.hpp"

#include <fmt/format.h>

#include <cmath>

namespace troupe {

namespace {

// JSON has no NaN or Inf: a diverged run reports null rather than an unparsable file.
std::string json_number(double x) {
  return std::isfinite(x) ? fmt::format("{:.6g}", x) : "null";
}

}  // namespace

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string to_json(const job_report& r) {
  std::string out = "{\n";
  out += fmt::format("  \"test_accuracy\": {},\n", json_number(r.test_accuracy));
  out += fmt::format("  \"steps\": {},\n", r.steps);
  out += fmt::format("  \"wall_s\": {},\n", json_number(r.wall_s));
  out += fmt::format("  \"updates_applied\": {},\n", r.updates_applied);
  out += fmt::format("  \"updates_rejected\": {},\n", r.updates_rejected);
  out += fmt::format("  \"max_staleness\": {},\n", r.max_staleness);
  out += fmt::format("  \"mean_staleness\": {},\n", json_number(r.mean_staleness));
  out += fmt::format("  \"staleness\": {{\"mean\": {}, \"p50\": {}, \"p99\": {}, \"max\": {}}},\n",
                     json_number(r.mean_staleness), json_number(r.staleness_p50),
                     json_number(r.staleness_p99), r.max_staleness);
  out += fmt::format("  \"max_clock_gap\": {},\n", r.max_clock_gap);
  for (const auto& [name, value] : r.figures)
    out += fmt::format("  {}: {},\n", json_string(name), json_number(value));
  out += fmt::format("  \"restarts\": {},\n", r.restarts);
  out += fmt::format("  \"escalations\": {},\n", r.escalations);
  out += fmt::format("  \"updates_lost\": {},\n", r.updates_lost);
  out += fmt::format("  \"recovery_s\": {},\n", json_number(r.recovery_s));
  out += fmt::format("  \"checkpoints\": {},\n", r.checkpoints);
  out += fmt::format("  \"resumed_from_step\": {},\n", r.resumed_from_step);
  out += fmt::format("  \"mode\": {},\n", json_string(r.mode));
  out += fmt::format("  \"allreduce_bytes\": {},\n", r.allreduce_bytes);
  out += fmt::format("  \"allreduce_bytes_inter_host\": {},\n", r.allreduce_bytes_inter_host);
  out += fmt::format("  \"allreduce_s\": {},\n", json_number(r.allreduce_s));
  out += fmt::format("  \"overlap\": {},\n", json_number(r.overlap));
  out += fmt::format("  \"generations\": {},\n", r.generations);
  out += fmt::format("  \"reform_s\": {},\n", json_number(r.reform_s));
  out += fmt::format("  \"skipped_steps\": {},\n", r.skipped_steps);
  out += fmt::format("  \"checksum_mismatches\": {},\n", r.checksum_mismatches);
  out += fmt::format("  \"status\": {},\n", json_string(r.failure.empty() ? "finished" : "failed"));
  out += "  \"settings\": {";
  for (size_t i = 0; i < r.settings.size(); ++i)
    out += fmt::format("{}{}: {}", i ? ", " : "", json_string(r.settings[i].first),
                       json_string(r.settings[i].second));
  out += "},\n";
  if (!r.failure.empty()) out += fmt::format("  \"failure\": {},\n", json_string(r.failure));
  out += "  \"losses\": [";
  for (size_t i = 0; i < r.losses.size(); ++i)
    out += fmt::format(
        "{}{{\"name\": {}, \"role\": {}, \"at_s\": {}, \"at_unix_ms\": {}, \"reason\": {}}}",
        i ? ", " : "", json_string(r.losses[i].name), json_string(to_string(r.losses[i].kind)),
        json_number(r.losses[i].at_s), r.losses[i].at_unix_ms, json_string(r.losses[i].reason));
  out += "],\n";
  out += "  \"workers_lost\": [";
  for (size_t i = 0; i < r.workers_lost.size(); ++i)
    out += (i ? ", " : "") + json_string(r.workers_lost[i]);
  out += "],\n  \"drained\": [";
  for (size_t i = 0; i < r.drained.size(); ++i) out += (i ? ", " : "") + json_string(r.drained[i]);
  out += "],\n  \"workers\": [";
  for (size_t i = 0; i < r.workers.size(); ++i)
    out += fmt::format("{}\n    {{\"name\": {}, \"steps\": {}, \"utilization\": {}}}", i ? "," : "",
                       json_string(r.workers[i].name), r.workers[i].steps,
                       json_number(r.workers[i].utilization));
  out += r.workers.empty() ? "],\n  \"epochs\": [" : "\n  ],\n  \"epochs\": [";
  for (size_t i = 0; i < r.epochs.size(); ++i) {
    const auto& e = r.epochs[i];
    out += fmt::format(
        "{}\n    {{\"epoch\": {}, \"test_accuracy\": {}, \"test_loss\": {}, \"train_loss\": {}, "
        "\"wall_s\": {}{}}}",
        i ? "," : "", e.epoch, json_number(e.test_accuracy), json_number(e.test_loss),
        json_number(e.train_loss), json_number(e.wall_s),
        r.mode == "dp" ? fmt::format(", \"examples\": {}", e.examples) : std::string{});
  }
  out += r.epochs.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

}  // namespace troupe
