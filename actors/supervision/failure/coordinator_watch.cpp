#include "actors/supervision/failure/coordinator_watch.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <caf/event_based_actor.hpp>

#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/error.hpp"
#include "troupe/metrics.hpp"

namespace troupe {

namespace {

using self_ptr = coordinator_watch_actor::stateful_pointer<coordinator_watch_state>;

const std::string coordinator_name = "coordinator";

// Runs the handshake with the first of the coordinators that admits us: those but `lost` for
// --takeover-timeout-ms, then all of them until --join-timeout. Detached: the handshake blocks
// its thread.
caf::behavior handshake(caf::event_based_actor* self, launch_options opts, host_port lost,
                        role sender, std::string name, logger log) {
  return {
      [=](join_atom) -> caf::result<coordinator_actor, std::string, uint16_t> {
        host_port where;
        launch_options others = opts;
        std::erase_if(others.coordinators, [&](const host_port& at) {
          return at.host == lost.host && at.port == lost.port;
        });
        others.join_timeout =
            std::max(std::chrono::seconds(1),
                     std::chrono::ceil<std::chrono::seconds>(opts.takeover_timeout));
        auto found = others.coordinators.empty()
                         ? caf::expected<coordinator_actor>{make_error(errc::timeout, "none")}
                         : join_cluster(self->system(), others, sender, name, log, &where);
        if (!found) found = join_cluster(self->system(), opts, sender, name, log, &where);
        self->quit();
        if (!found) return std::move(found.error());
        return {std::move(*found), where.host, where.port};
      },
  };
}

heartbeat beat_of(self_ptr self, const coordinator_watch_config& config) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto usage = current_process_usage();
  return heartbeat{
      config.name,
      ++self->state.sequence,
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()),
      usage.cpu_seconds,
      usage.rss_bytes,
      config.coordinator->activity().snapshot(),
      usage.peak_rss_bytes};
}

// The job is over for this process (its coordinator ended, and no standby took over): the
// launcher gives its members a bound to end, since one stuck in the user's code never will.
void job_over(const coordinator_watch_config& config, const std::string& why) {
  if (auto launcher = caf::actor_cast<caf::actor>(config.supervisor))
    caf::anon_send(launcher, stop_atom_v, why);
}

void tell_members(const coordinator_watch_config& config, self_ptr self, uint64_t term) {
  using rejoiner = caf::typed_actor<caf::reacts_to<rejoin_atom, uint64_t>>;
  for (const auto& member : config.coordinator->subscribers())
    if (auto handle = caf::actor_cast<rejoiner>(member)) self->send(handle, rejoin_atom_v, term);
  if (term == 0) job_over(config, "no coordinator took over");
}

void look_for_takeover(self_ptr self, const coordinator_watch_config& config,
                       const std::string& why);

// A coordinator answered the handshake: it takes over if its term is not older than ours.
void try_coordinator(self_ptr self, const coordinator_watch_config& config, coordinator_actor found,
                     host_port where) {
  self->request(found, config.opts.request_timeout, heartbeat_atom_v, encode(beat_of(self, config)))
      .then(
          [=](uint64_t term) {
            auto& st = self->state;
            if (found == config.coordinator->handle()) {  // ours, silent for a while: no rejoin
              config.log.info("the coordinator at {} answers again", to_string(where));
              st.looking = false;
              st.lost_since.reset();
              st.answers.heard(coordinator_name, heartbeat_monitor::clock::now());
              return;
            }
            if (!config.coordinator->switch_to(found, term)) {
              config.log.warn("the coordinator found is of term {}, not newer than ours ({})", term,
                              config.coordinator->term());
              st.looking = false;
              const auto bound = config.opts.join_timeout + config.opts.takeover_timeout;
              if (std::chrono::steady_clock::now() - *st.lost_since > bound) {
                config.log.error("no coordinator took over within {} s",
                                 std::chrono::duration_cast<std::chrono::seconds>(bound).count());
                return tell_members(config, self, 0);
              }
              return look_for_takeover(self, config, "an older coordinator answered");
            }
            config.log.info("the coordinator of term {} at {} took over; rejoining it", term,
                            to_string(where));
            st.looking = false;
            st.lost_since.reset();
            st.at = where;
            self->monitor(found);
            st.answers.heard(coordinator_name, heartbeat_monitor::clock::now());
            tell_members(config, self, term);
          },
          [=](caf::error& err) {
            self->state.looking = false;
            look_for_takeover(self, config,
                              "the coordinator found did not answer: " + describe(err));
          });
}

// The coordinator went down or fell silent: finds the one that took over (the other addresses
// first), or tells the members to stop when none answers within --join-timeout.
void look_for_takeover(self_ptr self, const coordinator_watch_config& config,
                       const std::string& why) {
  auto& st = self->state;
  if (st.looking || config.coordinator->closed()) return;
  st.looking = true;
  if (!st.lost_since) st.lost_since = std::chrono::steady_clock::now();
  config.log.warn("lost the coordinator ({}); looking for its standby", why);
  auto helper = self->spawn<caf::detached>(handshake, config.opts, st.at, config.sender,
                                           config.name, config.log);
  const auto bound =
      config.opts.takeover_timeout + config.opts.join_timeout + config.opts.request_timeout * 4;
  self->request(helper, bound, join_atom_v)
      .then(
          [=](coordinator_actor& found, std::string& host, uint16_t port) {
            try_coordinator(self, config, std::move(found), host_port{std::move(host), port});
          },
          [=](caf::error& err) {
            config.log.error("no coordinator took over: {}", describe(err));
            tell_members(config, self, 0);
          });
}

}  // namespace

coordinator_watch_actor::behavior_type coordinator_watch(self_ptr self,
                                                         coordinator_watch_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  const bool standby = config.coordinator->standby_listed();
  self->state.answers = heartbeat_monitor{config.opts.heartbeat_interval};
  self->state.at = config.joined;
  self->monitor(config.coordinator->handle());
  if (standby) self->state.answers.heard(coordinator_name, heartbeat_monitor::clock::now());
  self->set_down_handler([=](caf::down_msg& msg) {
    if (msg.source != config.coordinator->address()) return;
    if (standby && !config.coordinator->closed())
      return look_for_takeover(self, config, describe(msg.reason));
    job_over(config, msg.reason ? "the coordinator ended: " + describe(msg.reason)
                                : std::string("the coordinator ended"));
  });
  self->send(self, tick_atom_v);
  return {
      [=](tick_atom) {
        auto& st = self->state;
        self->delayed_send(self, config.opts.heartbeat_interval, tick_atom_v);
        if (st.looking) return;
        const auto coordinator = config.coordinator->handle();
        if (!standby) {  // nothing to fail over to: the coordinator's down message ends us
          caf::anon_send(coordinator, heartbeat_atom_v, encode(beat_of(self, config)));
          return;
        }
        self->request(coordinator, config.opts.takeover_timeout, heartbeat_atom_v,
                      encode(beat_of(self, config)))
            .then(
                [=](uint64_t) {
                  if (coordinator == config.coordinator->handle())
                    self->state.answers.heard(coordinator_name, heartbeat_monitor::clock::now());
                },
                [](caf::error&) {});  // silence is judged below
        const auto verdict =
            st.answers.expired(heartbeat_monitor::clock::now(), config.opts.takeover_timeout);
        if (!verdict.lost.empty())
          look_for_takeover(
              self, config,
              fmt::format("no answer for {} ms", config.opts.takeover_timeout.count()));
      },
  };
}

}  // namespace troupe
