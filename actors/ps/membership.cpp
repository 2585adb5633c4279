// The coordinator's membership: admitting servers and workers (late workers, and servers in
// the place of lost ones, too), losing them (their process went down, or their heartbeats
// stopped) and the heartbeat check.
#include <fmt/format.h>

#include "actors/ps/ps_plan_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::ps_plan {

// Workers that are training now (joined, not finished, not lost).
double live_workers(const coordinator_state& st) {
  return double(std::count_if(st.ps->roster.worker_members.begin(),
                              st.ps->roster.worker_members.end(),
                              [](const member& w) { return !w.lost && !w.done; }));
}

bool anyone_draining(const coordinator_state& st) {
  const auto draining = [](const member& m) { return m.draining; };
  return std::any_of(st.ps->roster.server_members.begin(), st.ps->roster.server_members.end(),
                     draining) ||
         std::any_of(st.ps->roster.worker_members.begin(), st.ps->roster.worker_members.end(),
                     draining);
}

double training_seconds(const coordinator_state& st) {
  const double at = st.shell.phase == job_phase::training ? st.shell.training_s() : 0.0;
  return st.shell.resumed_wall_s + at;
}

void record_loss(coordinator_state& st, const member& m, role kind, const std::string& why) {
  add(st.shell.metrics.lost, 1);
  if (!st.ps->roster.worker_members.empty()) set(st.shell.metrics.workers, live_workers(st));
  st.shell.report.losses.push_back(
      loss_event{m.name, kind, training_seconds(st), unix_ms_now(), why});
}

// Whether another worker may join the running job: fewer than --max-workers are active.
bool room_for_a_late_worker(const coordinator_state& st, const launch_options& o) {
  return st.shell.phase == job_phase::training &&
         live_workers(st) < double(std::max(o.workers, o.max_workers)) &&
         st.ps->roster.worker_members.size() < (1u << 16);
}

// Whether a server may join the running job in the place of a lost one: fewer than --servers
// are live, and there are chains of copies (--replication 2 or more) to grow back onto it. A
// coordinator that took over counts the same way: the members its primary had lost stay lost.
// Not while a takeover waits for the members to rejoin (the chains are not linked yet): the
// takeover grows them once it is over.
bool room_for_a_replacement_server(const coordinator_state& st, const launch_options& o) {
  const auto live =
      std::count_if(st.ps->roster.server_members.begin(), st.ps->roster.server_members.end(),
                    [](const member& s) { return !s.lost && !s.drained; });
  return st.shell.phase == job_phase::training && !st.shell.succession.rejoining &&
         o.replication >= 2 && static_cast<uint32_t>(live) < o.servers &&
         st.ps->roster.server_members.size() < (1u << 16);
}

// -- membership ---------------------------------------------------------------------------------

template <class Handle>
caf::result<wire> admit(self_ptr self, const job_config& config, const wire& w, Handle handle,
                        std::vector<Handle>& handles, std::vector<member>& members, uint32_t wanted,
                        role expected) {
  auto request = decode<join_request>(w);
  if (!request) return std::move(request.error());
  if (request->sender != expected)
    return make_error(errc::malformed_message, "join: role does not match the handle");
  if (config.hands_out_buckets() && expected == role::worker)
    return make_error(errc::bad_configuration,
                      config.service ? "an app's parameter service has no workers: its clients "
                                       "connect to the app node"
                                     : "--mode hybrid: workers join the group's coordinator, "
                                       "not the tables'");
  // A lost member's name is free again: a restarted process may rejoin under it.
  const auto same = [&](const member& m) {
    return m.address == handle.address() || (m.name == request->name && !m.lost);
  };
  if (std::any_of(members.begin(), members.end(), same))
    return make_error(errc::bad_configuration,
                      fmt::format("a {} named '{}' has already joined; names must be unique",
                                  to_string(expected), request->name));
  bool late = false;
  if constexpr (std::is_same_v<Handle, worker_actor>)
    late = room_for_a_late_worker(self->state, config.opts);
  else
    late = room_for_a_replacement_server(self->state, config.opts);
  if (!late && (self->state.shell.phase != job_phase::joining || handles.size() >= wanted))
    return make_error(errc::job_failed,
                      fmt::format("the job already has its {} {}s", wanted, to_string(expected)));
  // A lost member's name coming back is a restarted process (or actor): it rejoins cold.
  if (std::any_of(members.begin(), members.end(),
                  [&](const member& m) { return m.lost && m.name == request->name; })) {
    ++self->state.shell.report.restarts;
    add(self->state.shell.metrics.restarts, 1);
    note_event(self->state.shell.timeline, training_seconds(self->state), "restart",
               fmt::format("{} {} came back", to_string(expected), request->name));
  }
  self->monitor(handle);
  member joined;
  joined.name = request->name;
  joined.address = handle.address();
  joined.data = request->data;
  joined.host = request->host_label;
  members.push_back(std::move(joined));
  set(self->state.shell.metrics.workers, live_workers(self->state));
  expect_heartbeats(self, request->name, handle.node());
  handles.push_back(std::move(handle));
  const auto rank = static_cast<uint32_t>(handles.size() - 1);
  if (late)
    config.log.info("{} '{}' joined the running job", to_string(expected), request->name);
  else
    config.log.info("{} '{}' joined ({} of {})", to_string(expected), request->name, rank + 1,
                    wanted);
  auto& st = self->state;
  if (late) {
    if constexpr (std::is_same_v<Handle, worker_actor>) {
      st.ps->training.work->add_worker();
      start_at_slowest(self, config, rank);
    } else {  // a replacement server: the chains short of copies grow back onto it
      for (uint32_t b = 0; b < st.ps->directory.homes.size(); ++b) fill_chain(self, config, b);
      send_standing(self, config);
    }
  } else if (st.ps->roster.servers.size() == config.opts.servers &&
             (config.hands_out_buckets() || st.ps->roster.workers.size() == config.opts.workers))
    place_buckets(self, config);
  return encode(join_reply{rank, config.opts.workers, config.opts.servers});
}

// Index of the member at `address` not yet known to be lost.
std::optional<size_t> find_live(const std::vector<member>& members,
                                const caf::actor_addr& address) {
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].address == address && !members[i].lost) return i;
  return std::nullopt;
}

// A member that leaves before the job starts simply leaves the roster.
template <class Handle>
void leave_roster(std::vector<Handle>& handles, std::vector<member>& members, size_t i,
                  const logger& log) {
  log.warn("'{}' left before the job started", members[i].name);
  handles.erase(handles.begin() + i);
  members.erase(members.begin() + i);
}

void lose_worker(self_ptr self, const job_config& config, size_t i, const std::string& why) {
  auto& st = self->state;
  auto& m = st.ps->roster.worker_members[i];
  m.lost = true;
  forget_member(self, m.name);
  if (m.done) return;
  config.log.warn("lost worker '{}' ({}); going on without it", m.name, why);
  st.shell.report.workers_lost.push_back(m.name);
  record_loss(st, m, role::worker, why);
  retire_everywhere(self, static_cast<uint32_t>(i));
  if (std::all_of(st.ps->roster.worker_members.begin(), st.ps->roster.worker_members.end(),
                  [](const member& w) { return w.lost; }))
    return fail_job(self, config, "every worker was lost; the last, '" + m.name + "': " + why);
  // Its unfinished batches go to the others; if nobody is left to do them, they are lost.
  st.ps->training.work->release(static_cast<uint32_t>(i));
  send_standing(self, config);
  settle_work(self, config);
}

// A member is gone: its process went down, or it stopped sending heartbeats.
void lose_member(self_ptr self, const job_config& config, const caf::actor_addr& who,
                 const std::string& why) {
  auto& st = self->state;
  if (st.shell.phase == job_phase::finishing) return;
  const bool joining = st.shell.phase == job_phase::joining;
  if (auto i = find_live(st.ps->roster.server_members, who)) {
    if (joining)
      return leave_roster(st.ps->roster.servers, st.ps->roster.server_members, *i, config.log);
    return lose_server(self, config, *i, why);
  }
  if (auto i = find_live(st.ps->roster.worker_members, who)) {
    if (joining)
      return leave_roster(st.ps->roster.workers, st.ps->roster.worker_members, *i, config.log);
    lose_worker(self, config, *i, why);
  }
}

void on_down(self_ptr self, const job_config& config, const caf::down_msg& msg) {
  lose_member(self, config, msg.source, describe(msg.reason));
}

caf::result<wire> admit_server(self_ptr self, const job_config& config, const wire& w,
                               server_actor handle) {
  auto& st = self->state;
  return admit(self, config, w, std::move(handle), st.ps->roster.servers,
               st.ps->roster.server_members, config.opts.servers, role::server);
}

caf::result<wire> admit_worker(self_ptr self, const job_config& config, const wire& w,
                               worker_actor handle) {
  auto& st = self->state;
  return admit(self, config, w, std::move(handle), st.ps->roster.workers,
               st.ps->roster.worker_members, config.opts.workers, role::worker);
}

}  // namespace troupe::ps_plan

namespace troupe {

bool ps_state::heard(coordinator_self, const job_config&, const heartbeat& beat) {
  bool ours = false;
  for (auto* members : {&roster.server_members, &roster.worker_members})
    for (auto& m : *members)
      if (m.name == beat.name && !m.lost && m.address) {  // not one yet to rejoin
        m.presence.take(beat);
        ours = true;
      }
  return ours;
}

void ps_state::silent(coordinator_self self, const job_config& config, const std::string& name,
                      const std::string& why) {
  caf::actor_addr who;  // (found first: losing it before the job starts erases it)
  for (const auto* members : {&roster.server_members, &roster.worker_members})
    for (const auto& m : *members)
      if (m.name == name && !m.lost) who = m.address;
  if (who) ps_plan::lose_member(self, config, who, why);
}

bool ps_state::busy() const {
  return evaluation.running || checkpoints.taking;
}

void ps_state::activity(std::vector<heard_activity>& out) const {
  for (const auto* members : {&roster.worker_members, &roster.server_members})
    for (const auto& m : *members)
      if (!m.lost) out.push_back(m.presence.last());
}

}  // namespace troupe
