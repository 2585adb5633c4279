// The shell's membership over every plan: one heartbeat monitor for the members in other
// processes (a pause of this process judges nobody, and is logged once), and the stall watch
// over the members' last activity.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "actors/job/coordinator_state.hpp"
#include "messages/codec.hpp"

namespace troupe {

void expect_heartbeats(coordinator_self self, const std::string& name, const caf::node_id& node) {
  // A node in another process must send heartbeats from now on; one that never does is lost
  // as surely as one that stops (nodes of the coordinator's own process send none).
  if (node != self->node()) self->state.shell.beats.heard(name, heartbeat_monitor::clock::now());
}

void forget_member(coordinator_self self, const std::string& name) {
  self->state.shell.beats.forget(name);
}

uint64_t on_heartbeat(coordinator_self self, const job_config& config, const wire& w) {
  auto& st = self->state;
  auto beat = decode<heartbeat>(w);
  if (!beat) return st.shell.succession.term;
  bool member = false;
  for (auto* plan : st.plans()) member = plan->heard(self, config, *beat) || member;
  if (!member) return st.shell.succession.term;
  st.shell.beats.heard(beat->name, heartbeat_monitor::clock::now());
  auto& peak = st.shell.peak_rss[beat->name];
  peak = std::max(peak, beat->peak_rss_bytes);
  return st.shell.succession.term;
}

double peak_rss_mb(const job_shell& shell, const std::string& name, bool here) {
  auto it = shell.peak_rss.find(name);
  const uint64_t bytes = here                         ? current_process_usage().peak_rss_bytes
                         : it != shell.peak_rss.end() ? it->second
                                                      : 0;
  return double(bytes) / 1048576.0;
}

void gather_peaks(coordinator_self self, const job_config& config, std::function<void()> then) {
  auto pending = std::make_shared<size_t>(1);  // held until every request is out
  auto answered = [pending, then] {
    if (--*pending == 0) then();
  };
  for (const auto& c : member_cards(self->state)) {
    if (!c.handle || c.handle.node() == self->node()) continue;
    ++*pending;
    self->request(c.handle, console_wait(config), usage_atom_v)
        .then(
            [=, name = c.name](uint64_t bytes) {
              auto& peak = self->state.shell.peak_rss[name];
              peak = std::max(peak, bytes);
              answered();
            },
            [=](caf::error&) { answered(); });  // its last heartbeat's figure stands
  }
  answered();
}

namespace {

// Members still to rejoin a takeover are judged by its deadline, and a primary that was paused
// with a standby following judges nobody until the standby has taken its standing again (it
// may have been deposed meanwhile).
void check_heartbeats(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  auto& heir = st.shell.succession;
  const auto now = heartbeat_monitor::clock::now();
  if (heir.rejoining || (heir.follower && !heir.confirmed)) return st.shell.beats.keep_time(now);
  const auto timeout = config.opts.heartbeat_timeout;
  const auto verdict = st.shell.beats.expired(now, timeout);
  if (verdict.not_running.count() > 0) {
    log_own_pause(config.log, verdict.not_running);
    if (heir.follower) heir.confirmed = false;
  }
  const std::string why = fmt::format("no heartbeat for {} ms", timeout.count());
  for (const auto& name : verdict.lost)
    for (auto* plan : st.plans()) plan->silent(self, config, name, why);
}

// Start-up, an evaluation, a checkpoint and a takeover may take long on purpose; each counts
// as progress when it ends. An app's service trains nothing: it has no progress to judge.
void check_stall(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  if (st.shell.finishing() || config.service) return;
  bool busy = !st.shell.started.has_value() || st.shell.phase != job_phase::training ||
              st.shell.succession.rejoining;
  std::vector<heard_activity> heard;
  for (auto* plan : st.plans()) {
    busy = plan->busy() || busy;
    plan->activity(heard);
  }
  if (auto why = judge_stall(st.shell.stall, busy, config.activity.get(), heard, st.shell.report))
    fail_job(self, config, *why);
}

}  // namespace

void check_members(coordinator_self self, const job_config& config) {
  check_heartbeats(self, config);
  check_stall(self, config);
}

}  // namespace troupe
