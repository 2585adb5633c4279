// Data-parallel jobs of the Fashion-MNIST MLP run in the test's own process (a coordinator
// and trainers over Gloo on loopback), for the tests of --mode dp: member 0's parameters
// after the job and its JSON report.
#pragma once

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "actors/coordinator/coordinator.hpp"
#include "actors/dp/trainer/dp_trainer.hpp"
#include "apps/fmnist/mlp_task.hpp"
#include "child_process.hpp"
#include "in_process_job.hpp"
#include "troupe/node.hpp"

namespace troupe::testing {

inline constexpr const char* data_dir = "/usr/share/datasets/fashion-mnist";
inline constexpr size_t train_examples = 20 * 128;  // 20 steps of 128 examples: one epoch

inline std::shared_ptr<const training_task> fmnist_task_of(size_t train = train_examples) {
  auto task = fmnist::make_fmnist_task(data_dir, train, 1000);
  BOOST_TEST_REQUIRE(bool(task), "the Fashion-MNIST files are needed");
  return std::shared_ptr<const training_task>(std::move(*task));
}

struct dp_run {
  std::vector<float> params;  // member 0's after the last epoch
  std::string report;         // the JSON report
  bool finished = false;
};

// Runs a dp job in this process: a coordinator and `workers` trainers, Gloo over loopback.
// `labels`: each trainer's host label (all "here" when empty).
inline dp_run run_dp(std::shared_ptr<const training_task> task, uint32_t workers, uint32_t batch,
                     std::vector<std::string> flags = {}, std::vector<std::string> labels = {}) {
  flags.insert(flags.end(), {"--mode", "dp", "--workers", std::to_string(workers), "--batch",
                             std::to_string(batch), "--epochs", "1", "--log-level", "warn"});
  const auto report =
      scratch("dp-" + std::to_string(workers) + "-" + std::to_string(batch) + ".json");
  flags.insert(flags.end(), {"--report", report.string()});
  auto opts = parse_launch_options(flags, [](const std::string&) { return std::nullopt; });
  BOOST_TEST_REQUIRE(bool(opts));
  dp_run out;
  caf::actor_system_config cfg;
  configure_actor_system(cfg, *opts);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  const logger log{"test", opts->level};
  job_config config{*opts, task, self->address(), log};
  config.on_parameters = [&out](uint32_t, std::span<const float> p) {
    out.params.assign(p.begin(), p.end());
  };
  auto coord = sys.spawn(coordinator, config);
  const auto link = fixed_link(caf::actor_cast<coordinator_actor>(coord));
  for (uint32_t i = 0; i < workers; ++i)
    sys.spawn<caf::detached>(
        dp_trainer, dp_trainer_config{link, task, "worker-" + std::to_string(i), "127.0.0.1",
                                      labels.empty() ? "here" : labels[i], opts->request_timeout,
                                      self->address(), log});
  out.finished = await_job_end(self, coord);
  out.report = read_file(report.string());
  return out;
}

inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += double(a[i] - b[i]) * double(a[i] - b[i]);
    norm += double(b[i]) * double(b[i]);
  }
  return std::sqrt(diff / norm);
}

}  // namespace troupe::testing
