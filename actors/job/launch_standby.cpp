// --role coordinator --standby-of HOST:PORT: the standby coordinator's process, for a
// parameter-service job's coordinator or a data-parallel one's (--mode).
#include <fmt/format.h>
#include <caf/scoped_actor.hpp>

#include "actors/coordinator/coordinator.hpp"
#include "actors/coordinator/standby.hpp"
#include "actors/dp/dp_coordinator.hpp"
#include "actors/job/launch_parts.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/error.hpp"

namespace troupe {

using namespace launch_detail;

namespace {

// Blocks until the standby hands over the primary's last state (true), or ends first (false:
// the job finished, or the primary refused it; `code` is the exit code then).
bool wait_for_takeover(caf::scoped_actor& self, const standby_actor& follower, wire& standing,
                       std::string& why, double& behind, int& code) {
  self->monitor(follower);
  bool over = false, handed = false;
  self->receive_while([&] { return !over; })(
      [&](state_atom, wire& w, std::string& reason, double behind_s) {
        standing = std::move(w);
        why = std::move(reason);
        behind = behind_s;
        handed = over = true;
      },
      [&](caf::down_msg& msg) {
        if (msg.source != follower.address()) return;
        code = !msg.reason || msg.reason == caf::exit_reason::normal ? 0 : 1;
        if (code) fmt::print(stderr, "standby: {}\n", describe(msg.reason));
        over = true;
      });
  return handed;
}

}  // namespace

int run_standby(const launch_options& opts, std::shared_ptr<const training_task> task,
                const app_description& app, const logger& log) {
  return with_node(opts, app, log, [&](caf::scoped_actor& self, node_metrics& metrics) {
    auto& sys = self->system();
    size_blas(opts, 1);
    launch_options to_primary = opts;
    to_primary.coordinators = {opts.standby_of};
    auto primary = join_cluster(sys, to_primary, role::coordinator, node_name(opts), log);
    if (!primary) {
      fmt::print(stderr, "{}: cannot follow the coordinator at {}: {}\n", app.name,
                 to_string(opts.standby_of), describe(primary.error()));
      return 1;
    }
    auto follower =
        sys.spawn(standby, standby_config{*primary, opts, self->address(),
                                          caf::actor_cast<caf::actor>(self), log.named("standby")});
    wire standing;
    std::string why;
    double behind = 0;
    int code = 1;
    if (!wait_for_takeover(self, follower, standing, why, behind, code)) return code;
    auto state = decode<coordinator_standing>(standing);  // checked when it came
    if (state->dp.has_value() != opts.data_parallel()) {
      fmt::print(stderr, "{}: the primary runs another kind of job (--mode)\n", app.name);
      self->send_exit(follower, caf::exit_reason::user_shutdown);
      return 1;
    }
    const auto heard = std::chrono::steady_clock::now() -
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(behind));
    launch_options own = opts;
    own.resume.clear();  // the job goes on from the primary's state, not a checkpoint
    coordinator_actor coord;
    if (opts.data_parallel()) {
      dp_coordinator_config config{own, task, self->address(), log.named("coordinator")};
      config.metrics = metrics.registry;
      config.takeover = std::move(*state);
      config.takeover_heard = heard;
      config.takeover_why = why;
      coord = caf::actor_cast<coordinator_actor>(sys.spawn(dp_coordinator, config));
    } else {
      coordinator_config config{own, task, self->address(), log.named("coordinator"),
                                metrics.registry};
      config.takeover = std::move(*state);
      config.takeover_heard = heard;
      config.takeover_why = why;
      coord = sys.spawn(coordinator, config);
    }
    code = serve_coordinator(self, opts, coord, app, log);
    self->send_exit(follower, caf::exit_reason::user_shutdown);
    return code;
  });
}

}  // namespace troupe
