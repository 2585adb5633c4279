// The parameter service plan's gathering for the console: every bucket's statistics, and the
// diagnostics of asynchrony built from them (update variance, loss oscillation,
// effective update ratio), each against its warning threshold (--warn-*).
#include <fmt/format.h>

#include <cmath>

#include "actors/bucket/bucket_store.hpp"
#include "actors/ps/ps_plan_parts.hpp"
#include "troupe/error.hpp"
#include "troupe/metrics_text.hpp"

namespace troupe::ps_plan {

namespace {

// Mean |difference| of successive chunk losses of one worker; none with fewer than two.
std::optional<double> oscillation(const std::deque<double>& losses) {
  if (losses.size() < 2) return std::nullopt;
  double sum = 0;
  for (size_t i = 1; i < losses.size(); ++i) sum += std::abs(losses[i] - losses[i - 1]);
  return sum / double(losses.size() - 1);
}

std::vector<std::string> diag_row(const char* name, double value, double threshold, bool over,
                                  const std::string& detail) {
  return {name, fixed(value, 4), fixed(threshold, 4), over ? "warn" : "ok", detail};
}

}  // namespace

void gather_stats(self_ptr self, const job_config& config,
                  std::function<void(std::vector<std::optional<bucket_stats>>)> done) {
  auto& st = self->state;
  using all_stats = std::vector<std::optional<bucket_stats>>;
  auto stats = std::make_shared<all_stats>(st.ps->directory.buckets.size());
  auto pending = std::make_shared<size_t>(st.ps->directory.buckets.size() + 1);
  auto answered = [=] {
    if (--*pending == 0) done(std::move(*stats));
  };
  for (uint32_t b = 0; b < st.ps->directory.buckets.size(); ++b)
    self->request(st.ps->directory.buckets[b], console_wait(config), stats_atom_v)
        .then(
            [=](const wire& w) {
              if (auto s = decode<bucket_stats>(w); s && s->bucket == b) (*stats)[b] = *s;
              answered();
            },
            [=](caf::error&) { answered(); });
  answered();
}

table_view diagnose(const coordinator_state& st, const diag_thresholds& warn,
                    const std::vector<std::optional<bucket_stats>>& stats) {
  table_view t{{"diagnostic", "value", "threshold", "state", "detail"}, {}};
  // Update variance: the worst bucket's.
  double worst = 0, sum = 0;
  size_t worst_bucket = 0, answered = 0;
  uint64_t applied = 0, received = 0;
  for (const auto& s : stats) {
    if (!s) continue;
    ++answered;
    sum += s->update_variance;
    if (s->update_variance >= worst) worst = s->update_variance, worst_bucket = s->bucket;
    applied += s->updates_applied;
    received += s->updates_applied + s->updates_rejected + s->updates_skipped;
  }
  t.rows.push_back(diag_row(
      "update_variance", worst, warn.update_variance, worst > warn.update_variance,
      answered
          ? fmt::format("worst bucket-{}, mean {:.4f} over {} buckets (norms of the last "
                        "{} gradients each)",
                        worst_bucket, sum / double(answered), answered, bucket_store::update_window)
          : "no bucket answered"));
  // Loss oscillation: the mean over workers of their mean |successive difference|.
  double osc_sum = 0, osc_worst = 0;
  std::string osc_worker;
  size_t counted = 0;
  for (const auto& m : st.ps->roster.worker_members) {
    const auto o = oscillation(m.recent_losses);
    if (!o) continue;
    osc_sum += *o;
    ++counted;
    if (*o >= osc_worst) osc_worst = *o, osc_worker = m.name;
  }
  const double osc = counted ? osc_sum / double(counted) : 0.0;
  t.rows.push_back(diag_row(
      "loss_oscillation", osc, warn.loss_oscillation, osc > warn.loss_oscillation,
      counted ? fmt::format("mean |loss change| between a worker's last {} chunks; worst '{}' "
                            "{:.4f}",
                            recent_loss_count, osc_worker, osc_worst)
              : "fewer than two chunks reported"));
  // Effective update ratio: applied over received (applied, refused, or skipped as non-finite).
  const double ratio = received ? double(applied) / double(received) : 1.0;
  t.rows.push_back(diag_row("effective_update_ratio", ratio, warn.update_ratio,
                            ratio < warn.update_ratio,
                            fmt::format("{} of {} pushes applied", applied, received)));
  return t;
}

}  // namespace troupe::ps_plan
