#include "actors/job/job_shell.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "troupe/error.hpp"

namespace troupe {

void write_report(const job_shell& shell, const launch_options& opts, const logger& log) {
  if (opts.report.empty()) return;
  if (auto err = write_report_file(opts.report, shell.report, flag_settings(opts)))
    log.error("{}", describe(err));
}

void record_epoch(job_shell& shell, const launch_options& opts, const evaluated_epoch& e) {
  const eval_output& out = *e.out;
  const double wall = shell.wall_s();
  if (!out.figures.empty()) shell.report.figures = out.figures;
  shell.report.epochs.push_back(
      epoch_entry{e.epoch + 1, out.result.accuracy, out.result.loss, e.train_loss, wall});
  shell.scalars.evaluation(e.epoch_end, shell.report.epochs.back());
  // Throughput of this run (a resumed job counts from where it resumed) and the time left.
  const auto pace =
      throughput_of(e.done, shell.report.resumed_from_step, e.total, shell.training_s());
  shell.display.line(fmt::format(
      "epoch {}/{}  test_accuracy {:.4f}  test_loss {:.4f}  train_loss {:.4f}  {:.1f} s  {:.0f} "
      "batches/s  eta {:.1f} s",
      e.epoch + 1, opts.epochs, out.result.accuracy, out.result.loss, e.train_loss, wall, pace.rate,
      pace.eta_s));
  shell.curve.on_evaluation(wall, e.done, e.epoch + 1, out.result.accuracy);
  shell.stall.progress(stall_watch::clock::now());
  set(shell.metrics.epochs, e.epoch + 1);
  set(shell.metrics.accuracy, out.result.accuracy);
}

uint64_t checkpoint_interval(const launch_options& o, uint64_t units_per_epoch) {
  if (o.checkpoint_dir.empty()) return 0;
  return o.checkpoint_every ? o.checkpoint_every : std::max<uint64_t>(units_per_epoch, 1);
}

namespace {

void tell_checkpoint_waiters(job_shell& shell, const caf::expected<std::string>& outcome) {
  auto waiters = std::move(shell.checkpoints.waiters);
  shell.checkpoints.waiters.clear();
  for (auto& tell : waiters) tell(outcome);
}

}  // namespace

void checkpoint_written(job_shell& shell, const logger& log, uint64_t step, const std::string& path,
                        double took_s) {
  ++shell.report.checkpoints;
  add(shell.metrics.checkpoints, 1);
  note_event(shell.timeline, shell.wall_s(), "checkpoint", fmt::format("step {}: {}", step, path));
  shell.checkpoints.written.push_back(path);
  log.info("checkpoint after step {}: {} ({:.2f} s to write)", step, path, took_s);
  tell_checkpoint_waiters(shell, path);
}

void checkpoint_missed(job_shell& shell, const logger& log, const caf::error& why) {
  log.warn("no checkpoint written: {}", describe(why));
  tell_checkpoint_waiters(shell, why);
}

void restore_history(job_shell& shell, const coordinator_standing& x) {
  job_report& r = shell.report;
  r.checkpoints = x.written.size();
  shell.checkpoints.written = x.written;
  shell.checkpoints.since_last = x.since_last;
  r.losses = x.losses;
  r.takeovers = x.takeovers;
  r.workers_lost = x.workers_lost;
  r.resumed_from_step = x.resumed_from_step;
  shell.resumed_wall_s = x.resumed_wall_s;
}

void note_primary_lost(job_shell& shell, const coordinator_standing& x, const std::string& why) {
  shell.report.losses.push_back(loss_event{"coordinator (term " + std::to_string(x.term) + ")",
                                           role::coordinator, shell.succession.lost_at_s,
                                           unix_ms_now(), why});
  add(shell.metrics.lost, 1);
}

}  // namespace troupe
