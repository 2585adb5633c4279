// The shell's functions over every plan of a job: its end (failed or finished) and its standing.
#include <fmt/format.h>

#include "actors/job/coordinator_state.hpp"
#include "actors/job/succession.hpp"
#include "messages/codec.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// The report's figures: each plan's, and the coordinator process's memory.
void fill_report(coordinator_self self, const job_config& config) {
  for (auto* plan : self->state.plans()) plan->fill_report(self, config);
  self->state.shell.report.coordinator_peak_rss_mb =
      double(current_process_usage().peak_rss_bytes) / 1048576.0;
}

}  // namespace

void end_job(coordinator_self self, const job_config& config, caf::error reason) {
  auto& st = self->state;
  st.shell.phase = job_phase::finishing;
  const std::string why = reason ? describe(reason) : std::string{};
  release_follower(self, why);
  const caf::error ended = make_error(errc::job_failed, why.empty() ? "stopped" : why);
  std::vector<caf::actor> members;
  for (auto* plan : st.plans()) {
    plan->end(ended);
    plan->live_members(members);
  }
  if (!st.shell.checkpoints.waiters.empty()) checkpoint_missed(st.shell, config.log, ended);
  stop_members_then(self, members, stop_bound(st.shell, config.opts), why,
                    [self, reason] { self->quit(reason); });
}

void fail_job(coordinator_self self, const job_config& config, std::string why) {
  auto& st = self->state;
  if (st.shell.finishing()) return;
  if (defer_end_while_overdue(st.shell.succession, config.opts.takeover_timeout, why)) return;
  config.log.error("the job failed: {}", why);
  fill_report(self, config);
  st.shell.report.failure = why;
  write_report(st.shell, config.opts, config.log);
  end_job(self, config, make_error(errc::job_failed, std::move(why)));
}

namespace {

// Winds up plans[i..] in turn, then `then()`.
void wind_up_from(coordinator_self self, const job_config& config, size_t i,
                  std::function<void()> then) {
  const auto plans = self->state.plans();
  if (i >= plans.size()) return then();
  plans[i]->wind_up(self, config, [=] { wind_up_from(self, config, i + 1, then); });
}

}  // namespace

void finish_job(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  if (st.shell.finishing()) return;
  if (defer_end_while_overdue(st.shell.succession, config.opts.takeover_timeout, std::nullopt))
    return;
  st.shell.phase = job_phase::finishing;
  release_follower(self, {});  // before the statistics: the standby must not take over now
  // Every process's peak memory first, then each plan's wind-up, then the report.
  auto report = [=] {
    auto& st = self->state;
    fill_report(self, config);
    write_report(st.shell, config.opts, config.log);
    const job_report& r = st.shell.report;
    std::string line = fmt::format("done: test_accuracy {:.4f}, {} steps, {:.1f} s, {} skipped",
                                   r.test_accuracy, r.steps, r.wall_s, r.skipped_steps);
    for (auto* plan : st.plans()) line += ", " + plan->summary(r);
    config.log.info("{}", line);
    end_job(self, config, caf::error{});
  };
  gather_peaks(self, config, [=] { wind_up_from(self, config, 0, report); });
}

void send_standing(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  if (st.shell.finishing()) return;
  if (!st.shell.succession.follower) {
    for (auto* plan : st.plans()) plan->without_standby(self);
    return;
  }
  coordinator_standing x;
  x.term = st.shell.succession.term;
  const job_report& r = st.shell.report;
  x.losses = r.losses;
  x.takeovers = r.takeovers;
  x.workers_lost = r.workers_lost;
  x.resumed_from_step = r.resumed_from_step;
  x.resumed_wall_s = st.shell.resumed_wall_s;
  x.written = st.shell.checkpoints.written;
  x.since_last = st.shell.checkpoints.since_last;
  // In training once every plan is (--mode hybrid: the tables placed and the group formed).
  x.training = true;
  std::vector<std::function<void()>> held;
  for (auto* plan : st.plans()) plan->stand(self, config, x, held);
  const bool training = x.training;
  offer_standing(
      self, config.opts.takeover_timeout, encode(x), training, config.log,
      [held] {
        for (const auto& tell : held) tell();
      },
      [=](caf::error err) {
        // Not fail(): the report and the members are the new coordinator's now.
        self->state.shell.phase = job_phase::finishing;
        self->quit(std::move(err));
      });
}

void begin_takeover(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  const coordinator_standing& x = *config.takeover;
  auto& heir = st.shell.succession;
  heir.term = x.term + 1;
  heir.rejoining = true;
  heir.lost_at = std::chrono::steady_clock::now();  // the standby has just judged it lost
  heir.deadline = heir.lost_at + 2 * config.opts.takeover_timeout;
  st.shell.phase = job_phase::training;
  // Training time goes on from the old primary's, counted from when its last state came.
  const double behind = std::chrono::duration<double>(heir.lost_at - config.takeover_heard).count();
  st.shell.started =
      config.takeover_heard - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(x.plan.wall_s - x.resumed_wall_s));
  heir.lost_at_s = x.plan.wall_s + behind;
  restore_history(st.shell, x);
  note_primary_lost(st.shell, x, config.takeover_why);
  config.log.warn("taking over from the coordinator of term {} ({})", x.term, config.takeover_why);
}

void end_takeover_when_back(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  auto& heir = st.shell.succession;
  if (!heir.rejoining) return;
  size_t missing = 0, back = 0;
  for (auto* plan : st.plans()) {
    missing += plan->missing();
    back += plan->rejoined();
  }
  const bool late = std::chrono::steady_clock::now() >= heir.deadline;
  if (missing > 0 && !late) return;
  if (missing > 0) config.log.warn("the takeover's deadline passed: members not back are lost");
  if (!conclude_takeover(self, back, config.log)) return;
  for (auto* plan : st.plans()) {
    plan->taken_over(self, config);
    if (st.shell.finishing()) return;  // a loss ended the job
  }
}

uint64_t follow_job(coordinator_self self, const job_config& config, standby_actor standby) {
  return accept_follower(self, std::move(standby), config.log,
                         [=] { send_standing(self, config); });
}

}  // namespace troupe
