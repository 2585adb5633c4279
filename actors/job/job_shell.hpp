// job_shell: what a job's coordinator keeps whatever its mode: its phase, the report and
// timeline, metrics and curves, the heartbeats of every member, the stall watch, the
// checkpoint schedule, the operators' gate and its succession (the standby following it, a
// takeover under way). The coordinator (actors/coordinator) holds one as `shell` beside the
// plans of its mode, and the shell's functions (shell.cpp, shell_end.cpp, shell_members.cpp,
// shell_console.cpp) do for every plan what is the same: write the report, count an evaluated
// epoch, judge silence and stalls, note a checkpoint written, answer the console, take over,
// stop the members and quit. Called by the coordinator and its plans only.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/job/evaluator.hpp"
#include "actors/job/succession.hpp"
#include "actors/records/job_scalars.hpp"
#include "actors/records/progress_line.hpp"
#include "actors/records/report.hpp"
#include "actors/records/timing.hpp"
#include "actors/records/training_curve.hpp"
#include "actors/supervision/admission/operator_gate.hpp"
#include "actors/supervision/failure/heartbeat.hpp"
#include "actors/supervision/failure/stall_watch.hpp"
#include "actors/supervision/node_metrics.hpp"
#include "messages/protocol.hpp"
#include "troupe/error.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"

namespace troupe {

// joining: members join; placing: the parameter service places its buckets; training; and
// finishing: the end has begun (members are being stopped), nothing is judged any more.
enum class job_phase { joining, placing, training, finishing };

// The checkpoints a job writes, whatever its plan takes them from: the units (a parameter
// service's batches) since the last one, the files written, and the console's `checkpoint`
// requests waiting for the next file.
struct checkpoint_schedule {
  uint64_t since_last = 0;
  std::vector<std::string> written;  // by this job, oldest first (a standing carries them)
  std::vector<std::function<void(caf::expected<std::string>)>> waiters;

  // `units` more are done: whether a checkpoint is due now, one every `every` units
  // (checkpoint_interval; 0: none).
  bool count(uint64_t units, uint64_t every) {
    since_last += units;
    return every > 0 && since_last >= every;
  }
};

// Units between checkpoints: --checkpoint-every, or one epoch of `units_per_epoch` when it is
// 0; none without --checkpoint-dir.
uint64_t checkpoint_interval(const launch_options& o, uint64_t units_per_epoch);

struct job_shell {
  job_phase phase = job_phase::joining;
  job_report report;
  std::vector<timeline_event> timeline;  // checkpoints, restarts, drains: the timeline view's
  job_metrics metrics;
  job_scalars scalars;    // --tensorboard
  progress_line display;  // progress on the terminal
  training_curve curve;   // the console's export-curve
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
  // When training began, on this coordinator's clock (a takeover sets it back by the time the
  // old primary trained); unset before.
  std::optional<std::chrono::steady_clock::time_point> started;
  double resumed_wall_s = 0;        // training time before the checkpoint resumed from
  operator_gate operators{{}, {}};  // set from the options when the coordinator starts
  succession_state succession;      // the term, the standby, a takeover under way
  stall_watch stall;                // --stall-timeout
  heartbeat_monitor beats;          // every member in another process, whatever its plan
  checkpoint_schedule checkpoints;
  std::map<std::string, uint64_t> peak_rss;  // by member: its process's most resident bytes

  bool finishing() const { return phase == job_phase::finishing; }
  // Seconds of training on this coordinator's clock (0 before training).
  double training_s() const { return started ? seconds_since(*started) : 0.0; }
  // The job's training time, the time before the checkpoint resumed from included.
  double wall_s() const { return resumed_wall_s + training_s(); }
};

// Writes the report to --report, if given; an error is logged.
void write_report(const job_shell& shell, const launch_options& opts, const logger& log);

// An epoch evaluated: `epoch` counts from 0; `done` of the job's `total` steps are done (the
// resumed ones included), `epoch_end` is the step its last batch was (TensorBoard's x).
struct evaluated_epoch {
  uint32_t epoch = 0;
  const eval_output* out = nullptr;
  double train_loss = 0;
  uint64_t epoch_end = 0;
  uint64_t done = 0;
  uint64_t total = 0;
};

// An evaluated epoch: its row in the report (and the task's figures, if any), its scalars and
// curve point, the terminal's line with the rate and the time left, the metrics, and progress
// for the stall watch.
void record_epoch(job_shell& shell, const launch_options& opts, const evaluated_epoch& e);

// A checkpoint after `step` is written at `path` (in `took_s`): the report's count, the metric,
// the timeline, the log, and the console's requests are told.
void checkpoint_written(job_shell& shell, const logger& log, uint64_t step, const std::string& path,
                        double took_s);
// No checkpoint was written (`why`): logged, and the console's requests are told.
void checkpoint_missed(job_shell& shell, const logger& log, const caf::error& why);

// Taking over: the report's history (losses, takeovers, workers lost, the step and training
// time resumed from) is the standing's.
void restore_history(job_shell& shell, const coordinator_standing& standing);

// Taking over: the old primary of `standing` is a lost member (a loss in the report, the
// metric), lost `why`.
void note_primary_lost(job_shell& shell, const coordinator_standing& standing,
                       const std::string& why);

// A takeover's rejoining is over (all back, or the deadline passed) with `rejoined` members
// back. None: they all still reach the old primary (only the standby lost it), whose job is
// left alone (no report, no stop, no fence): this standby quits and false is returned.
// Otherwise the takeover is in the report and the log, and true is returned.
template <class Self>
bool conclude_takeover(Self self, size_t rejoined, const logger& log) {
  auto& shell = self->state.shell;
  auto& heir = shell.succession;
  heir.rejoining = false;
  if (rejoined == 0) {
    log.error(
        "no member rejoined within {} ms: the old coordinator is still theirs; "
        "this standby gives up",
        std::chrono::duration_cast<std::chrono::milliseconds>(heir.deadline - heir.lost_at)
            .count());
    shell.phase = job_phase::finishing;
    self->quit(make_error(errc::job_failed, "no member rejoined the takeover"));
    return false;
  }
  const double took = seconds_since(heir.lost_at);
  shell.report.takeovers.push_back(takeover_event{heir.lost_at_s, took, heir.term});
  log.info("took over as the coordinator of term {} in {:.2f} s", heir.term, took);
  return true;
}

// Asks each of `members` (those not lost) to stop with `why`, each within `bound`, then calls
// `quit()` once all answered or timed out.
template <class Self>
void stop_members_then(Self self, const std::vector<caf::actor>& members,
                       std::chrono::milliseconds bound, const std::string& why,
                       std::function<void()> quit) {
  auto pending = std::make_shared<size_t>(1);  // held until every request is out
  auto done = [pending, quit] {
    if (--*pending == 0) quit();
  };
  for (const auto& handle : members) {
    ++*pending;
    self->request(handle, bound, stop_atom_v, why)
        .then([=](bool) { done(); }, [=](caf::error&) { done(); });
  }
  done();
}

// How long a member has to answer the stop: a stalled job's members may be stuck in user code,
// so a heartbeat timeout is theirs; otherwise a request's.
inline std::chrono::milliseconds stop_bound(const job_shell& shell, const launch_options& o) {
  return shell.report.stalled ? o.heartbeat_timeout : o.request_timeout;
}

}  // namespace troupe
