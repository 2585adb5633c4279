// Parameter-service jobs (--mode ps and diloco) run in the test's own process: a coordinator,
// its servers and workers as run_app's embedded role spawns them, for tests that compare the
// parameters: the buckets' snapshot after the last epoch and the JSON report.
#pragma once

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <memory>
#include <string>
#include <vector>

#include "actors/coordinator/coordinator.hpp"
#include "actors/server/server.hpp"
#include "actors/worker/worker.hpp"
#include "child_process.hpp"
#include "in_process_job.hpp"
#include "troupe/node.hpp"

namespace troupe::testing {

struct ps_run {
  std::vector<float> params;  // the buckets' after the last epoch
  std::string report;         // the JSON report
  bool finished = false;
};

// Runs `flags` (--workers, --servers, --epochs ... as given) in this process.
inline ps_run run_ps(std::shared_ptr<const training_task> task, std::vector<std::string> flags) {
  static int runs = 0;
  const auto report = scratch("ps-run-" + std::to_string(++runs) + ".json");
  flags.insert(flags.end(), {"--log-level", "warn", "--report", report.string()});
  auto opts = parse_launch_options(flags, [](const std::string&) { return std::nullopt; });
  BOOST_TEST_REQUIRE(bool(opts), (opts ? "" : describe(opts.error())));
  ps_run out;
  caf::actor_system_config cfg;
  configure_actor_system(cfg, *opts);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  const logger log{"test", opts->level};
  job_config config{*opts, task, self->address(), log};
  config.activity = std::make_shared<activity_board>();
  const uint32_t last = opts->epochs - 1;
  config.on_parameters = [&out, last](uint32_t epoch, std::span<const float> p) {
    if (epoch == last) out.params.assign(p.begin(), p.end());
  };
  const coordinator_actor coord = sys.spawn(coordinator, config);
  for (uint32_t i = 0; i < opts->servers; ++i)
    sys.spawn(server, server_config{fixed_link(coord), "server-" + std::to_string(i),
                                    opts->request_timeout, self->address(), log});
  const auto link = fixed_link(coord, config.activity);
  for (uint32_t i = 0; i < opts->workers; ++i)
    sys.spawn<caf::detached>(worker, worker_config{link, task, "worker-" + std::to_string(i),
                                                   opts->request_timeout, self->address(), log});
  out.finished = await_job_end(self, coord);
  out.report = read_file(report.string());
  return out;
}

}  // namespace troupe::testing
