// A standby taking over: the coordinator starts from the old primary's last standing (members,
// placement, the work plan, the report so far) with no handles, and each member rejoins with
// its own (a server with its buckets', a worker with where it is). Once every member the
// standing names is back, or when the takeover's deadline passes (the ones not back are lost,
// as if their heartbeats had stopped), the work plan learns what the workers did since that
// standing and the job goes on. With --mode hybrid this is the tables' coordinator: only its
// servers rejoin, and the group's coordinator that took over beside it gets the tables then.
#include <fmt/format.h>

#include "actors/coordinator/coordinator_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::coordination {

namespace {

void restore_member(member& m, const member_standing& x) {
  m.name = x.name;
  m.data = x.data;
  m.lost = x.lost;
  m.done = x.done;
  m.draining = false;  // a drain's continuation went with the old primary
  m.drained = x.drained;
  m.steps = x.steps;
  m.clock = x.clock;
  m.compute_s = x.compute_s;
  m.wall_s = x.wall_s;
}

void restore_report(coordinator_state& st, const coordinator_standing& x) {
  restore_history(st.shell, x);
  job_report& r = st.shell.report;
  r.drained = x.drained;
  r.restarts = x.restarts;
  r.escalations = x.escalations;
  r.recovery_s = x.recovery_s;
  r.checkpoints = x.written.size();
  r.epochs = x.plan.history;
  st.checkpoints.written = x.written;
  st.checkpoints.since_last = x.since_last;
  st.checkpoints.chunks_done = x.chunks_done;
}

// How many members have rejoined, and how many the standing names as live have not.
struct rejoined_count {
  size_t back = 0, missing = 0;
};
rejoined_count count_rejoined(const coordinator_state& st) {
  rejoined_count n;
  for (const auto* members : {&st.roster.server_members, &st.roster.worker_members})
    for (const auto& m : *members)
      if (m.address)
        ++n.back;
      else if (!m.lost)
        ++n.missing;
  return n;
}

join_reply reply_for(const coordinator_state& st, const coordinator_config& config, uint32_t rank) {
  return join_reply{rank, config.opts.workers, config.opts.servers, st.shell.succession.term};
}

// The rejoined workers' accounts: their chunks go back into the plan, and the losses of the
// chunks the old primary never heard of into the epochs'.
void reconcile_work(coordinator_state& st, const coordinator_config& config) {
  uint64_t counted_batches = 0;
  for (const auto& account : st.shell.succession.accounts) {
    const auto counted = st.training.work->adopt(account.rank, account.held, account.finished);
    for (size_t i : counted) {
      const auto& c = account.finished[i];
      add_chunk_loss(st, c, account.finished_loss[i]);
      counted_batches += c.count;
      ++st.checkpoints.chunks_done;
    }
  }
  st.shell.succession.accounts.clear();
  config.log.info("the workers finished {} batches the old coordinator had not counted",
                  counted_batches);
}

void finish_takeover(self_ptr self, const coordinator_config& config) {
  auto& st = self->state;
  auto& heir = st.shell.succession;
  if (!conclude_takeover(self, count_rejoined(st).back, config.log)) return;
  const bool tables_only = config.opts.hybrid();  // no workers, no work plan: the group's
  if (!tables_only) reconcile_work(st, config);
  for (auto& [reply, rank] : heir.replies) reply.deliver(encode(reply_for(st, config, rank)));
  heir.replies.clear();
  const std::string why = "did not rejoin after the takeover";
  for (size_t w = 0; w < st.roster.worker_members.size(); ++w)
    if (!st.roster.worker_members[w].lost && !st.roster.worker_members[w].address)
      lose_worker(self, config, w, why);
  if (st.shell.phase != job_phase::training) return;  // a loss ended the job
  // Copies nobody named leave their chains first (those of servers not back, and any a server
  // back did not name: one being added when the old primary went), so that the promotions
  // below pick only copies that answer.
  std::vector<std::vector<size_t>> relink_after(st.directory.homes.size());
  for (uint32_t b = 0; b < st.directory.homes.size(); ++b) {
    auto& chain = st.directory.homes[b].backups;
    size_t kept = 0;
    for (size_t k = 0; k < chain.size(); ++k) {
      if (chain[k].handle) {
        chain[kept++] = chain[k];
      } else if (relink_after[b].empty() || relink_after[b].back() != kept) {
        relink_after[b].push_back(kept);  // the copy before the gap forwards past it
      }
    }
    chain.resize(kept);
  }
  std::vector<size_t> missing;
  for (size_t s = 0; s < st.roster.server_members.size(); ++s)
    if (!st.roster.server_members[s].lost && !st.roster.server_members[s].address) {
      st.roster.server_members[s].lost = true;  // before any promotion looks for live copies
      missing.push_back(s);
    }
  for (size_t s : missing) {
    lose_server(self, config, s, why);
    if (st.shell.phase != job_phase::training) return;
  }
  for (uint32_t b = 0; b < st.directory.buckets.size(); ++b) {
    auto& home = st.directory.homes[b];
    if (home.recovering) continue;  // its promotion links and fills the chain
    if (!st.directory.buckets[b])
      return fail(self, config,
                  fmt::format("bucket {}: its primary's server rejoined without it", b));
    if (!relink_after[b].empty()) {
      config.log.warn("bucket {}: copies nobody named left the chain", b);
      for (size_t k : relink_after[b]) relink_restarted(self, config, b, k);
    }
    fill_chain(self, config, b);  // also onto a server that joined while the members rejoined
  }
  for (uint32_t r = 0; r < st.roster.worker_members.size(); ++r)
    if (st.roster.worker_members[r].lost || st.roster.worker_members[r].done)
      retire_everywhere(self, r);  // a done message may have gone with the old primary
  send_standing(self, config);
  if (tables_only)
    hand_tables(self);
  else
    settle_work(self, config);
}

// Checks a rejoin against the standing: the member of that role and rank, by name, live.
caf::expected<rejoin_request> check_rejoin(const coordinator_state& st, const wire& w, role as,
                                           const std::vector<member>& members) {
  auto request = decode<rejoin_request>(w);
  if (!request) return std::move(request.error());
  if (request->sender != as)
    return make_error(errc::malformed_message, "rejoin: role does not match the handle");
  if (request->rank >= members.size() || members[request->rank].name != request->name)
    return make_error(errc::authentication_failed,
                      fmt::format("rejoin: no {} '{}' of rank {} in this job", to_string(as),
                                  request->name, request->rank));
  if (members[request->rank].lost)
    return make_error(errc::job_failed, "rejoin: this member was declared lost");
  if (!st.shell.succession.rejoining && !members[request->rank].address)
    return make_error(errc::job_failed, "rejoin: too late, the takeover is over");
  return request;
}

template <class Handle>
void readmit(self_ptr self, member& m, const Handle& handle) {
  m.address = handle.address();
  m.heard = heartbeat_monitor::clock::now();
  self->monitor(handle);
  self->state.roster.beats.heard(m.name, m.heard);
}

}  // namespace

void take_over(self_ptr self, const coordinator_config& config) {
  auto& st = self->state;
  const coordinator_standing& x = *config.takeover;
  auto& heir = st.shell.succession;
  heir.term = x.term + 1;
  heir.rejoining = true;
  heir.lost_at = std::chrono::steady_clock::now();  // the standby has just judged it lost
  heir.deadline = heir.lost_at + 2 * config.opts.takeover_timeout;
  const double behind = std::chrono::duration<double>(heir.lost_at - config.takeover_heard).count();
  // Training time goes on from the old primary's, counted from when its last state came.
  const double trained = x.plan.wall_s - x.resumed_wall_s;
  st.shell.started =
      config.takeover_heard - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(trained));
  heir.lost_at_s = x.plan.wall_s + behind;
  st.roster.servers.resize(x.servers.size());
  st.roster.server_members.resize(x.servers.size());
  for (size_t i = 0; i < x.servers.size(); ++i)
    restore_member(st.roster.server_members[i], x.servers[i]);
  st.roster.workers.resize(x.workers.size());
  st.roster.worker_members.resize(x.workers.size());
  for (size_t i = 0; i < x.workers.size(); ++i)
    restore_member(st.roster.worker_members[i], x.workers[i]);
  restore_report(st, x);
  st.shell.phase = job_phase::training;
  if (auto err = lay_out_buckets(self, config)) return fail(self, config, describe(err));
  const bool tables_only = config.opts.hybrid();
  if (x.homes.size() != st.directory.homes.size() ||
      (!tables_only && x.plan.epochs != config.opts.epochs))
    return fail(self, config, "the old primary's state does not fit this job's flags");
  for (size_t b = 0; b < x.homes.size(); ++b) {
    auto& home = st.directory.homes[b];
    home.primary_server = x.homes[b].primary;
    for (uint32_t s : x.homes[b].backups) home.backups.push_back(bucket_copy{{}, s, 0});
  }
  st.directory.placed = st.directory.buckets.size();
  if (!tables_only) {
    st.training.work = work_plan::restore(x.plan, static_cast<uint32_t>(x.workers.size()));
    st.training.epoch_loss = x.plan.epoch_loss;
    st.training.epoch_batches = x.plan.epoch_batches;
    st.evaluation.rows = config.task->evaluation_rows();
    st.evaluation.rows.resize(config.task->sparse_tables().size());
    st.evaluation.evaluated = x.plan.evaluated;
  }
  note_primary_lost(st.shell, x, config.takeover_why);
  config.log.warn(
      "taking over from the coordinator of term {} ({}); waiting for {} servers and "
      "{} workers to rejoin",
      x.term, config.takeover_why, x.servers.size(), x.workers.size());
}

caf::result<wire> rejoin_server(self_ptr self, const coordinator_config& config, const wire& w,
                                server_actor handle, std::vector<bucket_actor> buckets) {
  auto& st = self->state;
  auto request = check_rejoin(st, w, role::server, st.roster.server_members);
  if (!request) return std::move(request.error());
  if (request->buckets.size() != buckets.size())
    return make_error(errc::malformed_message, "rejoin: one handle per bucket");
  const uint32_t s = request->rank;
  auto& m = st.roster.server_members[s];
  if (m.address) {  // our own member, after its watch lost us for a while: nothing changes
    if (m.address != handle.address())
      return make_error(errc::bad_configuration, "rejoin: another server has that name");
    return encode(reply_for(st, config, s));
  }
  st.roster.servers[s] = handle;
  readmit(self, m, handle);
  for (size_t i = 0; i < buckets.size(); ++i) {
    const uint32_t b = request->buckets[i];
    if (b >= st.directory.homes.size()) continue;
    auto& home = st.directory.homes[b];
    if (home.primary_server == s)
      set_primary(self, b, buckets[i], s);  // which() requests held meanwhile get it
    else if (auto k = home.backup_on(s))
      home.backups[*k].handle = buckets[i];
  }
  config.log.info("server '{}' rejoined with {} buckets", m.name, buckets.size());
  if (count_rejoined(st).missing == 0) finish_takeover(self, config);
  return encode(reply_for(st, config, s));
}

caf::result<wire> rejoin_worker(self_ptr self, const coordinator_config& config, const wire& w,
                                worker_actor handle) {
  auto& st = self->state;
  auto request = check_rejoin(st, w, role::worker, st.roster.worker_members);
  if (!request) return std::move(request.error());
  const uint32_t r = request->rank;
  auto& m = st.roster.worker_members[r];
  if (m.address) {
    if (m.address != handle.address())
      return make_error(errc::bad_configuration, "rejoin: another worker has that name");
    if (!st.shell.succession.rejoining) return encode(reply_for(st, config, r));
    auto again = self->make_response_promise<wire>();  // answered with the others
    st.shell.succession.replies.emplace_back(again, r);
    return again;
  }
  st.roster.workers[r] = handle;
  readmit(self, m, handle);
  m.steps = request->steps;
  m.clock = request->clock;
  m.compute_s = request->compute_s;
  m.wall_s = request->wall_s;
  m.done = m.done || request->done;
  config.log.info("worker '{}' rejoined: {} batches, {} chunks held", m.name, m.steps,
                  request->held.size());
  st.shell.succession.accounts.push_back(std::move(*request));
  auto reply = self->make_response_promise<wire>();
  st.shell.succession.replies.emplace_back(reply, r);
  if (count_rejoined(st).missing == 0) finish_takeover(self, config);
  return reply;
}

void check_takeover(self_ptr self, const coordinator_config& config) {
  auto& heir = self->state.shell.succession;
  if (heir.rejoining && std::chrono::steady_clock::now() >= heir.deadline) {
    config.log.warn("the takeover's deadline passed: members not back are lost");
    finish_takeover(self, config);
  }
}

}  // namespace troupe::coordination
