// --mode hybrid launchers: the tables' coordinator (actors/coordinator, holding only the
// task's embedding tables on the servers) beside the group's (actors/dp), which trains the
// dense parameters by allreduce and uses the tables through the buckets.
#include <fmt/format.h>

#include "actors/coordinator/coordinator.hpp"
#include "actors/dp/coordinator/dp_coordinator.hpp"
#include "actors/launch/launch_parts.hpp"
#include "actors/server/server.hpp"
#include "troupe/node.hpp"

namespace troupe {

namespace launch_detail {

hybrid_roots spawn_hybrid_coordinators(caf::scoped_actor& self, const launch_options& opts,
                                       std::shared_ptr<const training_task> task, const logger& log,
                                       const node_metrics& metrics, hybrid_takeover* from) {
  auto& sys = self->system();
  launch_options table_opts = opts;
  table_opts.report.clear();
  coordinator_config table_config{table_opts, task, self->address(), log.named("tables"),
                                  metrics.registry};
  dp_coordinator_config group_config{opts, task, self->address(), log.named("coordinator")};
  group_config.metrics = metrics.registry;
  group_config.activity = std::make_shared<activity_board>();
  if (from) {
    table_config.takeover = std::move(from->tables.standing);
    table_config.takeover_heard = from->tables.heard;
    table_config.takeover_why = from->tables.why;
    group_config.takeover = std::move(from->group.standing);
    group_config.takeover_heard = from->group.heard;
    group_config.takeover_why = from->group.why;
  }
  hybrid_roots out;
  out.tables = sys.spawn(coordinator, table_config);
  group_config.tables = out.tables;
  out.group = sys.spawn(dp_coordinator, group_config);
  out.activity = group_config.activity;
  return out;
}

int serve_hybrid(caf::scoped_actor& self, const launch_options& opts, const hybrid_roots& roots,
                 const app_description& app, const logger& log) {
  auto gk = publish_gatekeeper(self, opts, caf::actor_cast<coordinator_actor>(roots.group), app,
                               log, roots.tables);
  if (!gk) {
    self->send_exit(roots.tables, caf::exit_reason::user_shutdown);
    return 1;
  }
  const int code = wait_for(self, roots.group.address(), app.name);
  self->send_exit(*gk, caf::exit_reason::user_shutdown);
  return code;
}

}  // namespace launch_detail

using namespace launch_detail;

int run_hybrid_embedded(const launch_options& opts, std::shared_ptr<const training_task> task,
                        const app_description& app, const logger& log) {
  return with_node(opts, app, log, [&](caf::scoped_actor& self, node_metrics& metrics) {
    auto& sys = self->system();
    size_blas(opts, opts.workers);
    const auto roots = spawn_hybrid_coordinators(self, opts, task, log, metrics);
    for (uint32_t i = 0; i < opts.servers; ++i) {
      const std::string name = "server-" + std::to_string(i);
      sys.spawn(server,
                server_config{fixed_link(roots.tables), name, opts.request_timeout, self->address(),
                              log.named(name), endpoint{}, opts.max_restarts, opts.restart_period,
                              metrics.registry, std::nullopt, app.rules});
    }
    const auto link = fixed_link(caf::actor_cast<coordinator_actor>(roots.group), roots.activity);
    for (uint32_t i = 0; i < opts.workers; ++i) {
      const std::string name = "worker-" + std::to_string(i);
      spawn_trainer(sys, opts, task, link, name, self->address(), log.named(name), app.rules);
    }
    return wait_for(self, roots.group.address(), app.name);
  });
}

int run_hybrid_coordinator(const launch_options& opts, std::shared_ptr<const training_task> task,
                           const app_description& app, const logger& log) {
  return with_node(opts, app, log, [&](caf::scoped_actor& self, node_metrics& metrics) {
    size_blas(opts, 1);
    return serve_hybrid(self, opts, spawn_hybrid_coordinators(self, opts, task, log, metrics), app,
                        log);
  });
}

}  // namespace troupe
