// A standby taking over: the coordinator starts from the old primary's last standing (members,
// placement, the work plan, the report so far) with no handles, and each member rejoins with
// its own (a server with its buckets', a worker with where it is). Once every member the
// standing names is back, or when the takeover's deadline passes (the ones not back are lost,
// as if their heartbeats had stopped), the work plan learns what the workers did since that
// standing and the job goes on. With --mode hybrid this is the tables' coordinator: only its
// servers rejoin, and the group's coordinator that took over beside it gets the tables then.
#include <fmt/format.h>

#include "actors/ps/ps_plan_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::ps_plan {

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
  job_report& r = st.shell.report;
  r.drained = x.drained;
  r.restarts = x.restarts;
  r.escalations = x.escalations;
  r.recovery_s = x.recovery_s;
  r.epochs = x.plan.history;
  st.ps->checkpoints.chunks_done = x.chunks_done;
}

join_reply reply_for(const coordinator_state& st, const job_config& config, uint32_t rank) {
  return join_reply{rank, config.opts.workers, config.opts.servers, st.shell.succession.term};
}

// The rejoined workers' accounts: their chunks go back into the plan, and the losses of the
// chunks the old primary never heard of into the epochs'.
void reconcile_work(coordinator_state& st, const job_config& config) {
  uint64_t counted_batches = 0;
  for (const auto& account : st.ps->accounts) {
    const auto counted = st.ps->training.work->adopt(account.rank, account.held, account.finished);
    for (size_t i : counted) {
      const auto& c = account.finished[i];
      add_chunk_loss(st, c, account.finished_loss[i]);
      counted_batches += c.count;
      ++st.ps->checkpoints.chunks_done;
    }
  }
  st.ps->accounts.clear();
  config.log.info("the workers finished {} batches the old coordinator had not counted",
                  counted_batches);
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
  m.presence.heard = heartbeat_monitor::clock::now();
  self->monitor(handle);
  expect_heartbeats(self, m.name, handle.node());
}

}  // namespace

void take_over(self_ptr self, const job_config& config) {
  auto& st = self->state;
  const coordinator_standing& x = *config.takeover;
  st.ps->roster.servers.resize(x.servers.size());
  st.ps->roster.server_members.resize(x.servers.size());
  for (size_t i = 0; i < x.servers.size(); ++i)
    restore_member(st.ps->roster.server_members[i], x.servers[i]);
  // --mode hybrid: the standing's workers are the dp plan's; this plan has servers only.
  const size_t workers = config.hands_out_buckets() ? 0 : x.workers.size();
  st.ps->roster.workers.resize(workers);
  st.ps->roster.worker_members.resize(workers);
  for (size_t i = 0; i < workers; ++i)
    restore_member(st.ps->roster.worker_members[i], x.workers[i]);
  restore_report(st, x);
  if (auto err = lay_out_buckets(self, config, false)) return fail_job(self, config, describe(err));
  const bool tables_only = config.opts.hybrid();
  if (x.homes.size() != st.ps->directory.homes.size() ||
      (!tables_only && x.plan.epochs != config.opts.epochs))
    return fail_job(self, config, "the old primary's state does not fit this job's flags");
  for (size_t b = 0; b < x.homes.size(); ++b) {
    auto& home = st.ps->directory.homes[b];
    home.primary_server = x.homes[b].primary;
    for (uint32_t s : x.homes[b].backups) home.backups.push_back(bucket_copy{{}, s, 0});
  }
  st.ps->directory.placed = st.ps->directory.buckets.size();
  if (!tables_only) {
    st.ps->training.work = work_plan::restore(x.plan, static_cast<uint32_t>(x.workers.size()));
    st.ps->training.epoch_loss = x.plan.epoch_loss;
    st.ps->training.epoch_batches = x.plan.epoch_batches;
    st.ps->evaluation.rows = config.task->evaluation_rows();
    st.ps->evaluation.rows.resize(config.task->sparse_tables().size());
    st.ps->evaluation.evaluated = x.plan.evaluated;
  }
  config.log.warn("waiting for {} servers and {} workers to rejoin", x.servers.size(), workers);
}

caf::result<wire> rejoin_server(self_ptr self, const job_config& config, const wire& w,
                                server_actor handle, std::vector<bucket_actor> buckets) {
  auto& st = self->state;
  auto request = check_rejoin(st, w, role::server, st.ps->roster.server_members);
  if (!request) return std::move(request.error());
  if (request->buckets.size() != buckets.size())
    return make_error(errc::malformed_message, "rejoin: one handle per bucket");
  const uint32_t s = request->rank;
  auto& m = st.ps->roster.server_members[s];
  if (m.address) {  // our own member, after its watch lost us for a while: nothing changes
    if (m.address != handle.address())
      return make_error(errc::bad_configuration, "rejoin: another server has that name");
    return encode(reply_for(st, config, s));
  }
  st.ps->roster.servers[s] = handle;
  readmit(self, m, handle);
  for (size_t i = 0; i < buckets.size(); ++i) {
    const uint32_t b = request->buckets[i];
    if (b >= st.ps->directory.homes.size()) continue;
    auto& home = st.ps->directory.homes[b];
    if (home.primary_server == s)
      set_primary(self, b, buckets[i], s);  // which() requests held meanwhile get it
    else if (auto k = home.backup_on(s))
      home.backups[*k].handle = buckets[i];
  }
  config.log.info("server '{}' rejoined with {} buckets", m.name, buckets.size());
  end_takeover_when_back(self, config);
  return encode(reply_for(st, config, s));
}

caf::result<wire> rejoin_worker(self_ptr self, const job_config& config, const wire& w,
                                worker_actor handle) {
  auto& st = self->state;
  auto request = check_rejoin(st, w, role::worker, st.ps->roster.worker_members);
  if (!request) return std::move(request.error());
  const uint32_t r = request->rank;
  auto& m = st.ps->roster.worker_members[r];
  if (m.address) {
    if (m.address != handle.address())
      return make_error(errc::bad_configuration, "rejoin: another worker has that name");
    if (!st.shell.succession.rejoining) return encode(reply_for(st, config, r));
    auto again = self->make_response_promise<wire>();  // answered with the others
    st.ps->replies.emplace_back(again, r);
    return again;
  }
  st.ps->roster.workers[r] = handle;
  readmit(self, m, handle);
  m.steps = request->steps;
  m.clock = request->clock;
  m.compute_s = request->compute_s;
  m.wall_s = request->wall_s;
  m.done = m.done || request->done;
  config.log.info("worker '{}' rejoined: {} batches, {} chunks held", m.name, m.steps,
                  request->held.size());
  st.ps->accounts.push_back(std::move(*request));
  auto reply = self->make_response_promise<wire>();
  st.ps->replies.emplace_back(reply, r);
  end_takeover_when_back(self, config);
  return reply;
}

}  // namespace troupe::ps_plan

namespace troupe {

size_t ps_state::missing() const {
  size_t n = 0;
  for (const auto* members : {&roster.server_members, &roster.worker_members})
    for (const auto& m : *members) n += !m.address && !m.lost;
  return n;
}

size_t ps_state::rejoined() const {
  size_t n = 0;
  for (const auto* members : {&roster.server_members, &roster.worker_members})
    for (const auto& m : *members) n += bool(m.address);
  return n;
}

void ps_state::taken_over(coordinator_self self, const job_config& config) {
  auto& st = self->state;
  const bool tables_only = config.opts.hybrid();  // no workers, no work plan: the group's
  if (!tables_only) ps_plan::reconcile_work(st, config);
  for (auto& [reply, rank] : st.ps->replies)
    reply.deliver(encode(ps_plan::reply_for(st, config, rank)));
  st.ps->replies.clear();
  const std::string why = "did not rejoin after the takeover";
  for (size_t w = 0; w < st.ps->roster.worker_members.size(); ++w)
    if (!st.ps->roster.worker_members[w].lost && !st.ps->roster.worker_members[w].address)
      ps_plan::lose_worker(self, config, w, why);
  if (st.shell.phase != job_phase::training) return;  // a loss ended the job
  // Copies nobody named leave their chains first (those of servers not back, and any a server
  // back did not name: one being added when the old primary went), so that the promotions
  // below pick only copies that answer.
  std::vector<std::vector<size_t>> relink_after(st.ps->directory.homes.size());
  for (uint32_t b = 0; b < st.ps->directory.homes.size(); ++b) {
    auto& chain = st.ps->directory.homes[b].backups;
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
  for (size_t s = 0; s < st.ps->roster.server_members.size(); ++s)
    if (!st.ps->roster.server_members[s].lost && !st.ps->roster.server_members[s].address) {
      st.ps->roster.server_members[s].lost = true;  // before any promotion looks for live copies
      missing.push_back(s);
    }
  for (size_t s : missing) {
    ps_plan::lose_server(self, config, s, why);
    if (st.shell.phase != job_phase::training) return;
  }
  for (uint32_t b = 0; b < st.ps->directory.buckets.size(); ++b) {
    auto& home = st.ps->directory.homes[b];
    if (home.recovering) continue;  // its promotion links and fills the chain
    if (!st.ps->directory.buckets[b])
      return fail_job(self, config,
                      fmt::format("bucket {}: its primary's server rejoined without it", b));
    if (!relink_after[b].empty()) {
      config.log.warn("bucket {}: copies nobody named left the chain", b);
      for (size_t k : relink_after[b]) ps_plan::relink_restarted(self, config, b, k);
    }
    ps_plan::fill_chain(self, config,
                        b);  // also onto a server that joined while the members rejoined
  }
  for (uint32_t r = 0; r < st.ps->roster.worker_members.size(); ++r)
    if (st.ps->roster.worker_members[r].lost || st.ps->roster.worker_members[r].done)
      ps_plan::retire_everywhere(self,
                                 r);  // a done message may have gone with the old primary
  send_standing(self, config);
  if (tables_only)
    ps_plan::hand_tables(self);
  else
    ps_plan::settle_work(self, config);
}

}  // namespace troupe
