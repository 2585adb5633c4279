#include "actors/supervision/supervisors/supervisor.hpp"

#include <fmt/format.h>

#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>

#include "troupe/error.hpp"

namespace troupe {

namespace {

using self_ptr = supervisor_actor::stateful_pointer<supervisor_state>;
using clock = std::chrono::steady_clock;

void start_child(self_ptr self, size_t i) {
  auto& c = self->state.children()[i];
  c.handle = c.spec.start(self, self->address());
  // Monitored, not linked: a child killed (exit_reason::kill, which no exit handler can
  // refuse) must not take its supervisor down with it. end_children stops them instead.
  self->monitor(c.handle);
}

// A restarted child has a new handle: the observer passes it on to whoever needs it.
void restart_child(self_ptr self, const supervisor_config& config, size_t i) {
  start_child(self, i);
  ++self->state.children()[i].restarts;
  const auto& c = self->state.children()[i];
  if (config.observer)
    self->send(caf::actor_cast<restart_observer>(config.observer), moved_atom_v, c.spec.name,
               c.handle);
}

// Stops child i on purpose: no down message, no restart.
void stop_child(self_ptr self, size_t i) {
  auto& c = self->state.children()[i];
  if (!c.handle) return;
  self->demonitor(c.handle);
  self->send_exit(c.handle, caf::exit_reason::user_shutdown);
  c.handle = nullptr;
}

// Counts a restart; false when it is one more than the intensity allows within the period.
bool within_intensity(self_ptr self, const supervisor_config& config) {
  auto& recent = self->state.recent;
  const auto now = clock::now();
  while (!recent.empty() && now - recent.front() > config.period) recent.pop_front();
  recent.push_back(now);
  return recent.size() <= config.max_restarts;
}

// backoff * 2^(restarts in the period - 1), at most max_backoff.
std::chrono::milliseconds backoff(const supervisor_state& st, const supervisor_config& config) {
  auto delay = config.backoff;
  for (size_t i = 1; i < st.recent.size() && delay < config.max_backoff; ++i) delay *= 2;
  return std::min(delay, config.max_backoff);
}

// The children that restart when child i fails, in start order.
std::vector<uint32_t> restart_set(const supervisor_state& st, restart_strategy strategy, size_t i) {
  std::vector<uint32_t> out;
  for (size_t j = 0; j < st.children().size(); ++j) {
    const bool wanted = strategy == restart_strategy::one_for_all ||
                        (strategy == restart_strategy::rest_for_one && j >= i) || j == i;
    if (wanted && st.children()[j].spec.policy != restart_policy::temporary)
      out.push_back(static_cast<uint32_t>(j));
  }
  return out;
}

void escalate(self_ptr self, const supervisor_config& config, const std::string& child) {
  auto& st = self->state;
  st.escalated = true;
  const std::string why =
      fmt::format("{}: child '{}' failed more than {} times in {} ms; giving up", config.name,
                  child, config.max_restarts, config.period.count());
  config.log.error("{}", why);
  for (size_t j = 0; j < st.children().size(); ++j) stop_child(self, j);
  self->quit(make_error(errc::job_failed, why));
}

// However the supervisor ends (its parent, escalation, a kill), what still runs ends with it,
// told by an exit message from the supervisor, the only sender their exit guards accept.
void end_children_with(self_ptr self) {
  self->attach_functor(
      [running = self->state.running, from = self->address()](const caf::error& reason) {
        const caf::error why = reason ? reason : caf::make_error(caf::exit_reason::user_shutdown);
        for (const auto& c : *running)
          if (c.handle) caf::anon_send(c.handle, caf::exit_msg{from, why});
      });
}

void on_child_down(self_ptr self, const supervisor_config& config, const caf::down_msg& msg) {
  auto& st = self->state;
  const auto it = std::find_if(st.children().begin(), st.children().end(), [&](const auto& c) {
    return c.handle && c.handle.address() == msg.source;
  });
  if (it == st.children().end()) return;
  const size_t i = static_cast<size_t>(it - st.children().begin());
  it->handle = nullptr;
  const bool failed = msg.reason && msg.reason != caf::exit_reason::normal;
  const auto policy = it->spec.policy;
  const bool mendable = !failed || !it->spec.restart_on || it->spec.restart_on(msg.reason);
  if (policy == restart_policy::temporary || (policy == restart_policy::transient && !failed) ||
      (failed && !mendable)) {
    config.log.info("{}: child '{}' ended ({}); not restarting it", config.name, it->spec.name,
                    failed ? describe(msg.reason) : "normally");
    const bool idle = st.pending.empty() && std::none_of(st.children().begin(), st.children().end(),
                                                         [](const auto& c) { return c.handle; });
    if (config.quit_when_idle && idle) self->quit(msg.reason);
    return;
  }
  if (!within_intensity(self, config)) return escalate(self, config, it->spec.name);
  ++st.restarts;
  const auto again = restart_set(st, config.strategy, i);
  for (uint32_t j : again)
    if (j != i) stop_child(self, j);
  const auto delay = backoff(st, config);
  config.log.warn("{}: child '{}' failed ({}); restarting {} child(ren) in {} ms", config.name,
                  it->spec.name, describe(msg.reason), again.size(), delay.count());
  st.pending.insert(st.pending.end(), again.begin(), again.end());
  self->delayed_send(self, delay, restart_atom_v, ++st.generation);
}

}  // namespace

supervisor_actor::behavior_type supervisor(self_ptr self, supervisor_config config,
                                           std::vector<child_spec> children) {
  // Exits from the parent end the supervisor, and its children with it (however it ends);
  // exits of children are handled by their down messages.
  self->set_exit_handler([self, parent = config.parent](caf::exit_msg& msg) {
    if (msg.source == parent) self->quit(std::move(msg.reason));
  });
  self->set_down_handler([self, config](caf::down_msg& msg) { on_child_down(self, config, msg); });
  end_children_with(self);
  for (auto& spec : children) self->state.children().push_back(supervised_child{std::move(spec)});
  for (size_t i = 0; i < self->state.children().size(); ++i) start_child(self, i);
  return {
      [=](stats_atom) -> std::tuple<uint64_t, uint64_t> {
        return {self->state.restarts, self->state.escalated ? 1 : 0};
      },
      [=](which_atom, const std::string& name) -> caf::result<caf::actor> {
        for (const auto& c : self->state.children())
          if (c.spec.name == name && c.handle) return c.handle;
        return make_error(errc::job_failed, "no running child named " + name);
      },
      [=](host_atom, const std::shared_ptr<const child_spec>& spec) -> caf::result<caf::actor> {
        auto& st = self->state;
        if (st.escalated) return make_error(errc::job_failed, config.name + " has given up");
        st.children().push_back(supervised_child{*spec});
        start_child(self, st.children().size() - 1);
        return st.children().back().handle;
      },
      [=](inspect_atom) {
        const auto& st = self->state;
        table_view t{{"actor", "kind", "state", "restarts"}, {}};
        for (size_t i = 0; i < st.children().size(); ++i) {
          const auto& c = st.children()[i];
          const bool waiting =
              std::find(st.pending.begin(), st.pending.end(), i) != st.pending.end();
          t.rows.push_back({c.spec.name, c.spec.kind,
                            c.handle  ? "live"
                            : waiting ? "restarting"
                                      : "stopped",
                            std::to_string(c.restarts)});
        }
        return encode(t);
      },
      [=](restart_atom, uint32_t generation) {
        auto& st = self->state;
        if (generation != st.generation || st.escalated) return;
        std::sort(st.pending.begin(), st.pending.end());
        st.pending.erase(std::unique(st.pending.begin(), st.pending.end()), st.pending.end());
        for (uint32_t j : st.pending)
          if (!st.children()[j].handle) restart_child(self, config, j);
        st.pending.clear();
      },
  };
}

caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_config config,
                            std::vector<child_spec> children) {
  return caf::actor_cast<caf::actor>(sys.spawn(supervisor, std::move(config), std::move(children)));
}

caf::actor spawn_supervisor(caf::local_actor* parent, supervisor_config config,
                            std::vector<child_spec> children) {
  config.parent = parent->address();
  return caf::actor_cast<caf::actor>(
      parent->spawn<caf::linked>(supervisor, std::move(config), std::move(children)));
}

void child_of(caf::event_based_actor* self, const caf::actor& supervisor, const std::string& name,
              std::chrono::milliseconds timeout,
              std::function<void(caf::expected<caf::actor>)> done) {
  self->request(caf::actor_cast<supervisor_actor>(supervisor), timeout, which_atom_v, name)
      .then([done](const caf::actor& child) { done(child); },
            [done](caf::error& err) {
              if (err == caf::sec::request_timeout)
                err = make_error(errc::timeout, "the supervisor did not answer");
              done(std::move(err));
            });
}

}  // namespace troupe
