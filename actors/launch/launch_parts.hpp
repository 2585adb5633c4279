// What run_app's launchers share (actors/launch/launch.cpp, launch_hybrid.cpp): waiting for the
// root actor, sizing BLAS, the DASH device, the node's metrics, spawning a dp trainer and
// publishing the gatekeeper. Internal to actors/launch.
#pragma once

#include <fmt/format.h>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "actors/bucket/dash_device.hpp"
#include "actors/dp/trainer/dp_trainer.hpp"
#include "messages/protocol.hpp"
#include "troupe/app.hpp"
#include "troupe/metrics.hpp"
#include "troupe/metrics_http.hpp"
#include "troupe/node.hpp"

namespace troupe::launch_detail {

// Blocks until `actor` ends; 0 if it ended normally, 1 (with the reason on stderr) otherwise.
// In a member's process, `activity` is its members' board: once its coordinator watch says the
// job is over, a member stuck for exit_bound::bound ends the process (launch.cpp).
int wait_for(caf::scoped_actor& self, const caf::actor_addr& actor, const std::string& program,
             const activity_board* activity = nullptr);

// A launcher's actor system, and the bound on its end. The actor system's destructor waits,
// without a bound, for every actor and detached thread to end, and CAF 0.17 can leave a
// detached actor that has ended never destroyed, so that wait never returns (CAF issue 1196,
// mended in 0.18; seen here as a dp worker whose job had finished, about once in 35 runs
// after a member's loss); a member stuck in the user's code never ends either. Declared first
// in a launcher, so that it goes last. A binary's process not ended within `bound` of it says
// so on stderr and ends with the code `returns` was given (1 if none). A library's caller
// (app_description::in_library: Python's troupe.run) must go on instead: the system is torn
// down on a thread of its own, waited for up to `bound`, and past it left behind, running.
class exit_bound {
 public:
  static constexpr auto bound = std::chrono::seconds(10);

  exit_bound(const launch_options& opts, const app_description& app);
  exit_bound(const exit_bound&) = delete;
  exit_bound& operator=(const exit_bound&) = delete;
  ~exit_bound();

  caf::actor_system& system() { return *system_; }

  // The launcher's exit code, remembered for the bound.
  int returns(int code) {
    code_ = code;
    return code;
  }

 private:
  std::string program_;
  bool in_library_ = false;
  int code_ = 1;
  std::unique_ptr<caf::actor_system_config> config_;  // the system keeps a reference to it
  std::unique_ptr<caf::actor_system> system_;
};

void size_blas(const launch_options& opts, unsigned local_workers);
// A coordinator's process (primary or standby): one BLAS thread unless --blas-threads. Its
// evaluation runs beside the workers' training, and OpenBLAS's idle threads yield in a loop (a
// coordinator with one per core spent a quarter of its CPU in sched_yield in the five-process
// fmnist job, taken from the workers and servers).
void size_blas_for_coordinator(const launch_options& opts);

// --dash-device gpu: the process's DASH device, shared by its buckets; none for cpu.
caf::expected<std::optional<dash_device_actor>> start_dash_device(caf::actor_system& sys,
                                                                  const launch_options& opts,
                                                                  const logger& log);

// This process's metrics registry with every node metric declared, served over HTTP when
// --metrics-port is given (on --listen's host) until the object goes.
struct node_metrics {
  std::shared_ptr<metrics_registry> registry = std::make_shared<metrics_registry>();
  std::unique_ptr<metrics_endpoint> endpoint;
};
caf::error start_metrics(const launch_options& opts, const logger& log, node_metrics& out);

// The frame of a launcher: this process's actor system, its metrics (started) and a scoped
// actor; runs body(self, metrics) and returns its exit code (1 when the metrics cannot start).
template <class Body>
int with_node(const launch_options& opts, const app_description& app, const logger& log,
              Body body) {
  exit_bound ending{opts, app};
  node_metrics metrics;
  if (auto err = start_metrics(opts, log, metrics)) {
    fmt::print(stderr, "{}: {}\n", app.name, describe(err));
    return 1;
  }
  caf::scoped_actor self{ending.system()};
  return ending.returns(body(self, metrics));
}

// A dp trainer of this process, named `name`, that ends with `parent`'s exit.
caf::actor spawn_trainer(caf::actor_system& sys, const launch_options& opts,
                         std::shared_ptr<const training_task> task, coordinator_link_ptr coord,
                         const std::string& name, caf::actor_addr parent, const logger& log,
                         const update_rules& rules);

// The job's gatekeeper, handing out `coord` (and `servers_join` to servers, when given),
// published on --listen. When the port cannot be opened it says why on stderr, stops the
// coordinator and the gatekeeper, and returns none.
std::optional<gatekeeper_actor> publish_gatekeeper(caf::scoped_actor& self,
                                                   const launch_options& opts,
                                                   const coordinator_actor& coord,
                                                   const app_description& app, const logger& log);

// Publishes `coord`'s gatekeeper (publish_gatekeeper), waits for the coordinator to end and
// closes the gatekeeper; the process's exit code (1 when the port cannot be opened).
int serve_coordinator(caf::scoped_actor& self, const launch_options& opts,
                      const coordinator_actor& coord, const app_description& app,
                      const logger& log);

// What a standby hands over for one coordinator it followed: the old primary's last standing,
// when it came, and why the primary was judged lost.
struct handed_standing {
  coordinator_standing standing;
  std::chrono::steady_clock::time_point heard;
  std::string why;
};

}  // namespace troupe::launch_detail

namespace troupe {

// --standby-of (launch_standby.cpp): a standby coordinator's process. It follows the primary,
// and once that is lost runs the coordinator that takes over from the primary's last state,
// publishing its gatekeeper on --listen for the members to rejoin.
int run_standby(const launch_options& opts, std::shared_ptr<const training_task> task,
                const app_description& app, const logger& log);

}  // namespace troupe
