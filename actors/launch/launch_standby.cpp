// --role coordinator --standby-of HOST:PORT: the standby coordinator's process, for a job of
// any --mode: it follows the primary's one coordinator (the shell and every plan of the job in
// one standing), and takes over from it with one coordinator.
#include <fmt/format.h>
#include <caf/scoped_actor.hpp>

#include "actors/coordinator/coordinator.hpp"
#include "actors/job/standby.hpp"
#include "actors/launch/launch_parts.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/error.hpp"

namespace troupe {

using namespace launch_detail;

namespace {

// One follower of this process: its actor, and how it ended or what it handed over.
struct follower {
  standby_actor actor;
  std::optional<handed_standing> handed;
  bool ended = false;
  int code = 0;  // when ended: 0 (the job is over) or 1 (it refused or failed)
};

follower spawn_follower(caf::scoped_actor& self, const launch_options& opts,
                        coordinator_actor primary, const logger& log) {
  auto& sys = self->system();
  return follower{sys.spawn(standby, standby_config{std::move(primary), opts, self->address(),
                                                    caf::actor_cast<caf::actor>(self), log})};
}

handed_standing handed_of(wire& w, std::string why, double behind_s) {
  handed_standing h;
  h.standing = std::move(*decode<coordinator_standing>(w));  // checked when it came
  h.heard = std::chrono::steady_clock::now() -
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(behind_s));
  h.why = std::move(why);
  return h;
}

// Blocks until every follower has handed over its primary's last state or ended. When one
// hands over, the others are told to take over too. True when all handed over; otherwise the
// ones that did are stopped and `code` is the exit code (0: the job is over).
bool wait_for_takeover(caf::scoped_actor& self, std::vector<follower>& all, int& code) {
  for (auto& f : all) self->monitor(f.actor);
  auto find = [&](const caf::actor_addr& a) -> follower* {
    for (auto& f : all)
      if (f.actor.address() == a) return &f;
    return nullptr;
  };
  auto open = [&] {
    return std::any_of(all.begin(), all.end(),
                       [](const follower& f) { return !f.ended && !f.handed; });
  };
  bool told = false;
  self->receive_while(open)(
      [&](state_atom, wire& w, std::string& why, double behind_s, const caf::actor_addr& from) {
        auto* f = find(from);
        if (!f || f->handed) return;
        f->handed = handed_of(w, why, behind_s);
        if (told) return;
        told = true;
        for (auto& other : all)
          if (&other != f && !other.ended && !other.handed)
            self->send(other.actor, takeover_atom_v,
                       "the other coordinator was lost (" + why + ")");
      },
      [&](caf::down_msg& msg) {
        auto* f = find(msg.source);
        if (!f) return;
        f->ended = true;
        f->code = !msg.reason || msg.reason == caf::exit_reason::normal ? 0 : 1;
        if (f->code) fmt::print(stderr, "standby: {}\n", describe(msg.reason));
        if (f->code && !told)  // one refused: following the others alone is no use
          for (auto& other : all)
            if (!other.ended) self->send_exit(other.actor, caf::exit_reason::user_shutdown);
      });
  if (std::all_of(all.begin(), all.end(), [](const follower& f) { return bool(f.handed); }))
    return true;
  code = 0;
  for (auto& f : all) {
    if (f.handed) self->send_exit(f.actor, caf::exit_reason::user_shutdown);
    if (f.ended) code = std::max(code, f.code);
  }
  return false;
}

// Runs the coordinator that takes over from the handed standing; the exit code.
int take_over(caf::scoped_actor& self, const launch_options& opts,
              std::shared_ptr<const training_task> task, const app_description& app,
              const logger& log, node_metrics& metrics, std::vector<follower>& all) {
  auto& sys = self->system();
  launch_options own = opts;
  own.resume.clear();  // the job goes on from the primary's state, not a checkpoint
  handed_standing& first = *all[0].handed;
  if (first.standing.dp.has_value() != opts.data_parallel()) {
    fmt::print(stderr, "{}: the primary runs another kind of job (--mode)\n", app.name);
    return 1;
  }
  job_config config{own, task, self->address(), log.named("coordinator"), metrics.registry};
  config.takeover = std::move(first.standing);
  config.takeover_heard = first.heard;
  config.takeover_why = first.why;
  const coordinator_actor coord = sys.spawn(coordinator, config);
  return serve_coordinator(self, opts, coord, app, log);
}

}  // namespace

int run_standby(const launch_options& opts, std::shared_ptr<const training_task> task,
                const app_description& app, const logger& log) {
  return with_node(opts, app, log, [&](caf::scoped_actor& self, node_metrics& metrics) {
    size_blas_for_coordinator(opts);
    launch_options to_primary = opts;
    to_primary.coordinators = {opts.standby_of};
    auto primary =
        join_cluster(self->system(), to_primary, role::coordinator, node_name(opts), log);
    if (!primary) {
      fmt::print(stderr, "{}: cannot follow the coordinator at {}: {}\n", app.name,
                 to_string(opts.standby_of), describe(primary.error()));
      return 1;
    }
    std::vector<follower> all;
    all.push_back(spawn_follower(self, opts, *primary, log.named("standby")));
    int code = 1;
    if (!wait_for_takeover(self, all, code)) return code;
    code = take_over(self, opts, task, app, log, metrics, all);
    for (auto& f : all) self->send_exit(f.actor, caf::exit_reason::user_shutdown);
    return code;
  });
}

}  // namespace troupe
