// The parameter service plan's part of the console's actions: a checkpoint now (its workers
// paused, its buckets saved), drain a node (it leaves cleanly, nothing is lost) and inject a
// fault. (The log level and the dispatch are the shell's: actors/job/shell_console.cpp.)
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/ps/ps_plan_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::ps_plan {

namespace {

// The worker finishes the push in flight (its progress arrives first), then leaves: its
// unfinished batches go to the others.
caf::result<std::string> drain_worker(self_ptr self, const job_config& config, size_t w) {
  auto& st = self->state;
  auto& m = st.ps->roster.worker_members[w];
  if (m.done) return make_error(errc::job_failed, "'" + m.name + "' has no work left to drain");
  if (live_workers(st) < 2)
    return make_error(
        errc::job_failed,
        "'" + m.name + "' is the last worker training: draining it would stop the job");
  m.draining = true;
  auto promise = self->make_response_promise<std::string>();
  self->request(st.ps->roster.workers[w], config.opts.request_timeout, pause_atom_v)
      .then(
          [=](bool) mutable {
            auto& st = self->state;
            auto& m = st.ps->roster.worker_members[w];
            m.draining = false;
            if (m.lost) {
              promise.deliver(std::string{"'" + m.name + "' was lost meanwhile"});
              return;
            }
            if (live_workers(st) < 2) {  // the others were lost meanwhile: it stays
              self->send(st.ps->roster.workers[w], resume_atom_v);
              promise.deliver(make_error(errc::job_failed, "'" + m.name +
                                                               "' stays: it is the last worker "
                                                               "training now"));
              return;
            }
            m.lost = m.drained = true;
            forget_member(self, m.name);
            st.shell.report.drained.push_back(m.name);
            note_event(st.shell.timeline, training_seconds(st), "drain", "worker " + m.name);
            set(st.shell.metrics.workers, live_workers(st));
            retire_everywhere(self, static_cast<uint32_t>(w));
            const uint64_t returned = st.ps->training.work->release(static_cast<uint32_t>(w));
            self->request(st.ps->roster.workers[w], config.opts.request_timeout, stop_atom_v, "")
                .then([](bool) {}, [](caf::error&) {});
            config.log.info("drained worker '{}'; {} batches go to the others", m.name, returned);
            promise.deliver(fmt::format(
                "drained worker '{}': {} unfinished batches go to the others", m.name, returned));
            settle_work(self, config);
          },
          [=](caf::error& err) mutable {
            auto& m = self->state.ps->roster.worker_members[w];
            m.draining = false;
            // It may have paused after all (its push was held up): let it go on.
            if (!m.lost) self->send(self->state.ps->roster.workers[w], resume_atom_v);
            promise.deliver(make_error(
                errc::job_failed, "draining '" + self->state.ps->roster.worker_members[w].name +
                                      "': " + describe(err)));
          });
  return promise;
}

// Every bucket whose primary is on server s gets a copy elsewhere first (where it has none);
// then the copies take over and s stops.
caf::result<std::string> drain_server(self_ptr self, const job_config& config, size_t s) {
  auto& st = self->state;
  auto& m = st.ps->roster.server_members[s];
  const bool another =
      std::any_of(st.ps->roster.server_members.begin(), st.ps->roster.server_members.end(),
                  [&](const member& o) { return &o != &m && !o.lost && !o.draining; });
  if (!another)
    return make_error(errc::job_failed, "no other server could take over from '" + m.name + "'");
  if (st.ps->directory.recovering > 0)
    return make_error(errc::job_failed, "a bucket is recovering; try again in a moment");
  m.draining = true;
  std::vector<uint32_t> to_copy;
  for (uint32_t b = 0; b < st.ps->directory.homes.size(); ++b) {
    const auto& home = st.ps->directory.homes[b];
    if (home.primary_server == s && !home.has_live_backup(st.ps->roster.server_members))
      to_copy.push_back(b);
  }
  auto promise = self->make_response_promise<std::string>();
  auto pending = std::make_shared<size_t>(to_copy.size() + 1);  // held until all are asked
  auto copied = [=]() mutable {
    if (--*pending > 0) return;
    auto& st = self->state;
    auto& m = st.ps->roster.server_members[s];
    m.draining = false;
    if (m.lost) {
      promise.deliver(std::string{"'" + m.name + "' was lost meanwhile"});
      return;
    }
    if (st.ps->directory.recovering >
        0) {  // another server was lost meanwhile: its promotions come first
      promise.deliver(make_error(errc::job_failed,
                                 "'" + m.name + "' stays: a bucket is recovering; try again"));
      return;
    }
    for (uint32_t b = 0; b < st.ps->directory.homes.size(); ++b) {
      const auto& home = st.ps->directory.homes[b];
      if (home.primary_server == s && !home.has_live_backup(st.ps->roster.server_members)) {
        promise.deliver(make_error(
            errc::job_failed, fmt::format("'{}' stays: bucket {} could not be copied", m.name, b)));
        return;
      }
    }
    size_t moved = 0;
    for (const auto& home : st.ps->directory.homes) moved += home.primary_server == s;
    hand_over_server(self, config, s);
    promise.deliver(fmt::format("drained server '{}': {} buckets moved ({} copied first)",
                                st.ps->roster.server_members[s].name, moved, to_copy.size()));
  };
  for (uint32_t b : to_copy) add_backup(self, config, b, copied);
  copied();
  return promise;
}

}  // namespace

caf::result<std::string> drain(self_ptr self, const job_config& config, const std::string& name) {
  auto& st = self->state;
  if (st.shell.phase != job_phase::training)
    return make_error(errc::job_failed, "nodes are drained while the job trains");
  if (st.ps->checkpoints.taking || anyone_draining(st))
    return make_error(errc::job_failed, "a checkpoint or another drain is under way; try again");
  for (size_t w = 0; w < st.ps->roster.worker_members.size(); ++w)
    if (st.ps->roster.worker_members[w].name == name && !st.ps->roster.worker_members[w].lost)
      return drain_worker(self, config, w);
  for (size_t s = 0; s < st.ps->roster.server_members.size(); ++s)
    if (st.ps->roster.server_members[s].name == name && !st.ps->roster.server_members[s].lost)
      return drain_server(self, config, s);
  return make_error(errc::bad_configuration,
                    "no live server or worker named '" + name + "' (see `nodes`)");
}

}  // namespace troupe::ps_plan

namespace troupe {

caf::result<std::string> ps_state::checkpoint_now(coordinator_self self, const job_config& config) {
  auto next = next_checkpoint(self);
  if (!checkpoints.taking) ps_plan::take_checkpoint(self, config);
  return next;
}

std::vector<std::string> ps_state::actions() const {
  return {"drain", "inject-fault"};
}

caf::result<std::string> ps_state::operate(coordinator_self self, const job_config& config,
                                           const std::vector<std::string>& action) {
  const std::string what = action.size() > 1 ? action[1] : std::string{};
  if (action.front() == "drain") return ps_plan::drain(self, config, what);
  auto done = ps_plan::inject_fault(self, what);  // inject-fault
  if (!done) return std::move(done.error());
  config.log.warn("fault injection: {}", *done);
  return std::move(*done);
}

}  // namespace troupe
