// The buckets handed out by a coordinator without workers of its own. --mode hybrid, the
// tables' coordinator's side of the group: it hands the group's coordinator the buckets of
// the task's embedding tables once they are ready, tells it of every server lost (the job's
// report is the group's), and stops the servers when the group says the job is over. The
// group's side is actors/dp/coordinator/dp_tables.cpp. An app's parameter service on servers
// (coordinator_config::service): the same, for the service's clients and its own process.
#include <algorithm>

#include "actors/coordinator/coordinator_parts.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/error.hpp"

namespace troupe::coordination {

namespace {

// Whether the group may have the tables: placed, no takeover under way, and a primary for
// every bucket (after a takeover, a promotion may still be finding one).
bool tables_ready(const coordinator_state& st) {
  return st.shell.phase == job_phase::training && !st.shell.succession.rejoining &&
         std::all_of(st.directory.buckets.begin(), st.directory.buckets.end(),
                     [](const bucket_actor& b) { return bool(b); });
}

// The live servers' data endpoints (to_server_list: "HOST:PORT[/LANE],..."), for the members to
// connect to, over their data lanes where the servers have them.
std::string server_list(const coordinator_state& st) {
  std::vector<endpoint> live;
  for (const auto& m : st.roster.server_members)
    if (!m.lost && m.data.port != 0) live.push_back(m.data);
  return to_server_list(live);
}

}  // namespace

void tables_placed(self_ptr self, const coordinator_config& config) {
  auto& st = self->state;
  st.shell.phase = job_phase::training;
  st.shell.started = std::chrono::steady_clock::now();
  config.log.info("{}: {} buckets on {} servers, {}", config.service ? "service" : "tables",
                  st.directory.buckets.size(), st.roster.servers.size(),
                  config.service ? "placed" : "handed to the group");
  hand_tables(self);
}

caf::result<std::vector<bucket_actor>, std::string> want_tables(self_ptr self,
                                                                const coordinator_config& config) {
  auto& st = self->state;
  if (config.service) {  // the service's clients ask, in this process or through its app node
    if (tables_ready(st)) return {st.directory.buckets, server_list(st)};
    if (st.tables_wanted.size() >= max_waiting)
      return make_error(errc::message_too_large, "too many requests wait for the buckets");
  } else {
    if (!config.opts.hybrid() || st.group)
      return make_error(errc::bad_configuration, "no tables for another group");
    st.group = caf::actor_cast<caf::actor_addr>(self->current_sender());
    if (tables_ready(st)) return {st.directory.buckets, server_list(st)};
  }
  st.tables_wanted.push_back(self->make_response_promise<std::vector<bucket_actor>, std::string>());
  return st.tables_wanted.back();
}

void hand_tables(self_ptr self) {
  auto& st = self->state;
  if (st.tables_wanted.empty() || !tables_ready(st)) return;
  for (auto& promise : st.tables_wanted) promise.deliver(st.directory.buckets, server_list(st));
  st.tables_wanted.clear();
}

void tell_group_of_loss(self_ptr self, const std::string& name, const std::string& why) {
  if (auto group = caf::actor_cast<dp_coordinator_actor>(self->state.group))
    self->send(group, event_atom_v, name, why);
}

void stop_for_group(self_ptr self, const coordinator_config& config, const std::string& failure) {
  // The group's coordinator ends a hybrid job; an app's service is stopped by its own process.
  const auto sender = self->current_sender();
  const bool owner = config.service ? sender && sender->node() == self->node()
                                    : config.opts.hybrid() && sent_by(self, self->state.group);
  if (!owner) return config.log.warn("ignored a stop that is not from the buckets' owner");
  stop_all_and_quit(self, config,
                    failure.empty() ? caf::error{} : make_error(errc::job_failed, failure));
}

}  // namespace troupe::coordination
