// A dp member's side of a standby coordinator. With more than one coordinator listed, the
// member holds each step report and each epoch's parameters it sends until the coordinator says
// its standby has them (state_atom). When the standby takes over, this process's coordinator
// watch switches the link and tells the member (rejoin_atom): it rejoins the new coordinator,
// then sends again, in order, all it holds; the new coordinator drops what it counted already.
// Training goes on meanwhile: the group's collectives do not pass through the coordinator.
#include "actors/dp/trainer/dp_trainer_parts.hpp"
#include "actors/records/timing.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_parts {

void send_report(self_ptr self, const dp_trainer_config& config, uint64_t step, wire report) {
  auto& st = self->state;
  self->send(coordinator_of(config), step_atom_v, report);
  if (!config.coordinator->standby_listed()) return;
  if (st.held_reports.size() >= max_held_reports) {
    if (!st.told_held_full)
      config.log.warn(
          "{} step reports not yet held by the standby; dropping the oldest (a takeover's "
          "report would miss their figures)",
          max_held_reports);
    st.told_held_full = true;
    st.held_reports.pop_front();
  }
  st.held_reports.emplace_back(step, std::move(report));
}

void send_parameters(self_ptr self, const dp_trainer_config& config, uint32_t epoch, uint32_t part,
                     wire parameters, std::function<void(bool delivered)> then) {
  if (config.coordinator->standby_listed()) self->state.held_parameters[{epoch, part}] = parameters;
  // A coordinator that does not answer is lost: with a standby, the part is sent again when
  // this member rejoins it (held above); without, the trainer stops on the coordinator's loss.
  self->request(coordinator_of(config), config.request_timeout, eval_atom_v, epoch, part,
                std::move(parameters))
      .then([then](bool) { then(true); },
            [=](caf::error& err) {
              config.log.warn("part {} of epoch {}'s parameters not delivered: {}", part, epoch + 1,
                              describe(err));
              then(false);
            });
}

void drop_held(dp_trainer_state& st, uint64_t reports_through, uint32_t evaluated) {
  while (!st.held_reports.empty() && st.held_reports.front().first <= reports_through)
    st.held_reports.pop_front();
  st.held_parameters.erase(st.held_parameters.begin(),
                           st.held_parameters.lower_bound({evaluated, 0}));
}

void rejoin(self_ptr self, const dp_trainer_config& config, uint64_t term) {
  if (!self->current_sender() || self->current_sender()->node() != self->node()) return;
  auto& st = self->state;
  if (term == 0)
    return fail(self, config, "training", make_error(errc::job_failed, "lost the coordinator"));
  rejoin_request request{role::worker, config.name, st.job ? st.job->rank : 0};
  request.steps = st.step;
  request.compute_s = st.compute_s;
  request.wall_s = st.job ? seconds_since(st.started) : 0.0;
  request.host = config.host_label;
  request.generation = std::max(st.job ? st.job->generation : uint64_t{0},
                                st.pending ? st.pending->generation : uint64_t{0});
  const auto coordinator = coordinator_of(config);
  self->monitor(coordinator);
  self->request(coordinator, config.request_timeout, rejoin_atom_v, encode(request),
                caf::actor_cast<dp_worker_actor>(self))
      .then(
          [=](const wire&) {
            config.log.info("rejoined the coordinator of term {}", term);
            auto waiting = std::move(self->state.after_rejoin);
            self->state.after_rejoin.clear();
            for (auto& ask_again : waiting) ask_again();
          },
          [=](caf::error& err) { fail(self, config, "rejoining the coordinator", err); });
  // After the rejoin, in order: what the old coordinator may not have passed on.
  for (const auto& [step, report] : st.held_reports) self->send(coordinator, step_atom_v, report);
  for (const auto& [at, parameters] : st.held_parameters)
    self->request(coordinator, config.request_timeout, eval_atom_v, at.first, at.second, parameters)
        .then([](bool) {}, [](caf::error&) {});  // (a coordinator lost again: sent once more)
  config.log.info(
      "rejoining the coordinator of term {} after step {}; sending again {} step "
      "reports and {} parts of epochs' parameters",
      term, st.step, st.held_reports.size(), st.held_parameters.size());
}

}  // namespace troupe::dp_parts
