#include "actors/job/standby.hpp"

#include <fmt/format.h>

#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using self_ptr = standby_actor::stateful_pointer<standby_state>;

const std::string primary_name = "primary";

void take_over(self_ptr self, const standby_config& config, const std::string& why) {
  auto& st = self->state;
  if (st.took_over) return;
  st.took_over = true;
  if (!st.latest || !st.latest_training) {
    config.log.error("the primary was lost ({}) before training began: nothing to take over", why);
    return self->quit(make_error(errc::job_failed, "the primary was lost before training began"));
  }
  config.log.warn("the primary is lost ({}); taking over", why);
  const double behind =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - st.heard).count();
  caf::anon_send(config.parent, state_atom_v, *st.latest, why, behind, self->address());
}

}  // namespace

standby_actor::behavior_type standby(self_ptr self, standby_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  self->state.silence = heartbeat_monitor{config.opts.heartbeat_interval};
  self->monitor(config.primary);
  self->set_down_handler([=](caf::down_msg& msg) {
    if (msg.source == config.primary.address()) take_over(self, config, describe(msg.reason));
  });
  self->request(config.primary, config.opts.request_timeout, follow_atom_v,
                caf::actor_cast<standby_actor>(self))
      .then(
          [=](uint64_t term) {
            config.log.info("following the coordinator at {} (term {})",
                            to_string(config.opts.standby_of), term);
            self->state.silence.heard(primary_name, heartbeat_monitor::clock::now());
            self->send(self, tick_atom_v);
          },
          [=](caf::error& err) {
            config.log.error("the primary refused to be followed: {}", describe(err));
            self->quit(std::move(err));
          });
  return {
      [=](state_atom, uint64_t term, const wire& w) -> caf::result<bool> {
        auto& st = self->state;
        if (st.took_over)
          return make_error(errc::deposed,
                            fmt::format("the coordinator of term {} took over", term + 1));
        if (!sent_by(self, config.primary.address()))
          return make_error(errc::authentication_failed, "state comes from the primary only");
        auto standing = decode<coordinator_standing>(w);
        if (!standing || standing->term != term)
          return make_error(errc::malformed_message, "a malformed state from the primary");
        st.latest = w;
        st.latest_training = standing->training;
        st.heard = std::chrono::steady_clock::now();
        st.term = term;
        st.silence.heard(primary_name, st.heard);
        return true;
      },
      [=](stop_atom, const std::string& failure) {
        if (!sent_by(self, config.primary.address()) || self->state.took_over) return;
        config.log.info("the job is over{}; the standby stops",
                        failure.empty() ? "" : " (" + failure + ")");
        self->quit();
      },
      [=](takeover_atom, const std::string& why) {
        if (!sent_by(self, config.parent.address())) return;
        take_over(self, config, why);
      },
      [=](tick_atom) {
        auto& st = self->state;
        if (st.took_over) return;
        self->delayed_send(self, config.opts.heartbeat_interval, tick_atom_v);
        const auto verdict =
            st.silence.expired(heartbeat_monitor::clock::now(), config.opts.takeover_timeout);
        if (verdict.not_running.count() > 0) log_own_pause(config.log, verdict.not_running);
        if (!verdict.lost.empty())
          take_over(self, config,
                    fmt::format("no state for {} ms", config.opts.takeover_timeout.count()));
      },
  };
}

}  // namespace troupe
