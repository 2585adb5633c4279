// The buckets handed out by a ps plan without workers of its own. --mode hybrid: the task's
// embedding tables, which the dp plan beside it in the same coordinator uses once they are
// ready (actors/dp/plan/dp_tables.cpp). An app's parameter service on servers
// (job_config::service): the service's buckets, for its clients and its own process, which
// stops it.
#include <algorithm>

#include "actors/ps/ps_plan_parts.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/error.hpp"

namespace troupe::ps_plan {

bool tables_ready(const coordinator_state& st) {
  return st.shell.phase == job_phase::training && !st.shell.succession.rejoining &&
         std::all_of(st.ps->directory.buckets.begin(), st.ps->directory.buckets.end(),
                     [](const bucket_actor& b) { return bool(b); });
}

// The live servers' data endpoints (to_server_list: "HOST:PORT[/LANE],..."), for the members to
// connect to, over their data lanes where the servers have them.
std::string server_list(const coordinator_state& st) {
  std::vector<endpoint> live;
  for (const auto& m : st.ps->roster.server_members)
    if (!m.lost && m.data.port != 0) live.push_back(m.data);
  return to_server_list(live);
}

void tables_placed(self_ptr self, const job_config& config) {
  auto& st = self->state;
  st.shell.phase = job_phase::training;
  // --mode hybrid: the training clock starts with the group (the dp plan), not the tables.
  if (!config.opts.hybrid()) st.shell.started = std::chrono::steady_clock::now();
  config.log.info("{}: {} buckets on {} servers, {}", config.service ? "service" : "tables",
                  st.ps->directory.buckets.size(), st.ps->roster.servers.size(),
                  config.service ? "placed" : "handed to the group");
  hand_tables(self);
}

caf::result<std::vector<bucket_actor>, std::string> want_tables(self_ptr self,
                                                                const job_config& config) {
  auto& st = self->state;
  if (config.service) {  // the service's clients ask, in this process or through its app node
    if (tables_ready(st)) return {st.ps->directory.buckets, server_list(st)};
    if (st.ps->tables_wanted.size() >= max_waiting)
      return make_error(errc::message_too_large, "too many requests wait for the buckets");
  } else {
    return make_error(errc::bad_configuration, "a training job hands out no buckets");
  }
  st.ps->tables_wanted.push_back(
      self->make_response_promise<std::vector<bucket_actor>, std::string>());
  return st.ps->tables_wanted.back();
}

void hand_tables(self_ptr self) {
  auto& st = self->state;
  if (!tables_ready(st)) return;
  if (st.on_tables_ready) st.on_tables_ready();
  if (st.ps->tables_wanted.empty()) return;
  for (auto& promise : st.ps->tables_wanted)
    promise.deliver(st.ps->directory.buckets, server_list(st));
  st.ps->tables_wanted.clear();
}

void stop_service(self_ptr self, const job_config& config, const std::string& failure) {
  // An app's service is stopped by its own process (a job ends by itself).
  const auto sender = self->current_sender();
  const bool owner = config.service && sender && sender->node() == self->node();
  if (!owner) return config.log.warn("ignored a stop that is not from the buckets' owner");
  end_job(self, config, failure.empty() ? caf::error{} : make_error(errc::job_failed, failure));
}

}  // namespace troupe::ps_plan
