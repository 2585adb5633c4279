// Test helper: troupe-fmnist jobs as real processes on loopback. `fmnist_command` adds the
// binary and the flags every test shares; `fmnist_cluster` starts a coordinator, servers and
// workers with extra flags (the destructors of child_process kill whatever is left), each job
// with a floor under its length (pace.hpp) and its coordinator's metrics served
// (`await_batches`). `full_job` gives the flags of the fault tests' job
// (all of Fashion-MNIST, 3 epochs) and `check_every_update_applied_once` what its report must
// show after a failure that replication covers; `report_array` reads a report's list.
// For tests only.
#pragma once

#include <fmt/format.h>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/integration/child_process.hpp"
#include "tests/support/pace.hpp"
#include "tests/support/progress.hpp"

namespace troupe::testing {

// `binary`, `head`, then `tail` (later flags win).
inline std::vector<std::string> app_command(const std::string& binary,
                                            std::vector<std::string> head,
                                            const std::vector<std::string>& tail) {
  head.insert(head.begin(), binary);
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}
inline std::vector<std::string> fmnist_command(std::vector<std::string> head,
                                               const std::vector<std::string>& tail) {
  return app_command(TROUPE_FMNIST_BIN, std::move(head), tail);
}

// How long the full job may take, and its flags (all of Fashion-MNIST, 3 epochs), then `extra`.
constexpr auto full_job_time = std::chrono::seconds(300);
inline std::vector<std::string> full_job(std::vector<std::string> extra) {
  const std::vector<std::string> full = {"--epochs", "3",           "--blas-threads",
                                         "1",        "--log-level", "info"};
  extra.insert(extra.begin(), full.begin(), full.end());
  return extra;
}

// The training examples of the full job (all of Fashion-MNIST; a third at the fast pace), and
// the batches of 64 in one epoch.
inline double full_job_examples() {
  return double(paced_count(60000));
}
inline double full_job_batches_per_epoch() {
  return std::ceil(full_job_examples() / 64);
}

// The test accuracy the full job must reach: 0.84 on all of the data, 0.82 on the fast pace's
// third of it.
inline double full_job_accuracy_bar() {
  return pace() == test_pace::fast ? 0.82 : 0.84;
}

// The full job on the parameter service with four buckets rather than the default one per
// server, so that each server holds several.
inline std::vector<std::string> full_ps_job(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--buckets", "4"});
  return full_job(std::move(extra));
}

// A finished full job's report: the accuracy bar, nothing counted lost, and every push of
// every step (one per bucket, `buckets` of them) applied exactly once.
inline void check_every_update_applied_once(const std::string& report, double buckets = 4) {
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
  BOOST_TEST(json_number(report, "updates_lost").value_or(-1) == 0);
  const double steps = json_number(report, "steps").value_or(0);
  BOOST_TEST(json_number(report, "updates_applied").value_or(0) == buckets * steps);
}

// The report's array `key` (losses, takeovers, epochs), parsed; empty when it has none.
inline troupe::json report_array(const std::string& report, const std::string& key) {
  const auto doc = parse_json(report);
  if (doc.is_object() && doc.contains(key) && doc[key].is_array()) return doc[key];
  return troupe::json::array();
}

struct fmnist_cluster {
  std::string address = "127.0.0.1:" + std::to_string(free_port());
  std::string tag = address.substr(10);
  std::filesystem::path report = scratch("cluster-" + tag + ".json");
  std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests",
                                  "TROUPE_OPERATOR_SECRET=an-operator-secret-for-tests"};
  std::unique_ptr<child_process> coordinator;
  std::unique_ptr<child_process> standby;  // with_standby: it follows the coordinator
  std::string standby_address;
  std::vector<std::unique_ptr<child_process>> servers, workers;
  uint16_t metrics_port = free_port();  // the primary coordinator's

  std::string binary;  // troupe-fmnist, or another app binary with the same roles (troupe-ctr)

  // `flags` go to every process; `coordinator_flags` to the coordinator (and its standby) only.
  // With a standby, the members are given both addresses. The job's floor is one millisecond
  // per batch per worker unless `coordinator_flags` set --worker-delay-ms themselves. Another
  // `program` runs with its own flag for the training examples (`data_flag`, paced).
  fmnist_cluster(std::vector<std::string> flags, uint32_t server_count = 2,
                 uint32_t worker_count = 2, std::vector<std::string> coordinator_flags = {},
                 bool with_standby = false, std::string program = TROUPE_FMNIST_BIN,
                 const std::string& data_flag = "--train-limit")
      : binary(std::move(program)) {
    flags = paced_data(std::move(flags), data_flag);
    coordinator_flags = with_floor(std::move(coordinator_flags), worker_count);
    coordinator_flags.insert(coordinator_flags.end(),
                             {"--role", "coordinator", "--workers", std::to_string(worker_count),
                              "--report", report.string()});
    if (server_count > 0)  // none: a data-parallel job (--mode dp)
      coordinator_flags.insert(coordinator_flags.end(),
                               {"--servers", std::to_string(server_count)});
    auto primary_flags = coordinator_flags;
    primary_flags.insert(primary_flags.end(),
                         {"--listen", address, "--metrics-port", std::to_string(metrics_port)});
    coordinator = std::make_unique<child_process>(command(primary_flags, flags),
                                                  scratch("c-" + tag + ".log").string(), env);
    members_join = address;
    if (with_standby) {
      standby_address = "127.0.0.1:" + std::to_string(free_port());
      coordinator_flags.insert(coordinator_flags.end(),
                               {"--listen", standby_address, "--standby-of", address});
      standby = std::make_unique<child_process>(command(coordinator_flags, flags),
                                                scratch("c2-" + tag + ".log").string(), env);
      members_join += "," + standby_address;
    }
    member_flags = std::move(flags);
    for (uint32_t i = 0; i < server_count; ++i) start_server();
    for (uint32_t i = 0; i < worker_count; ++i) start_worker();
  }

  // Starts another server or worker process (a replacement), named by its index:
  // server-<i>-<tag>, worker-<i>-<tag>.
  void start_server() { start_member("server", servers); }
  void start_worker() { start_member("worker", workers); }

  // Waits until the job has finished `batches` batches (the primary coordinator's count).
  bool await_batches(double batches, std::chrono::milliseconds bound = progress_bound) {
    return await_metric(metrics_port, "troupe_job_batches_total", batches, bound);
  }

  std::string members_join;               // the coordinators a member is given
  std::vector<std::string> member_flags;  // every member's flags

  void start_member(const std::string& role, std::vector<std::unique_ptr<child_process>>& into) {
    const size_t i = into.size();
    into.push_back(std::make_unique<child_process>(
        command({"--role", role, "--coordinator", members_join, "--name",
                 fmt::format("{}-{}-{}", role, i, tag)},
                member_flags),
        scratch(fmt::format("{}{}-{}.log", role[0], i, tag)).string(), env));
  }

  std::vector<std::string> command(std::vector<std::string> head,
                                   const std::vector<std::string>& tail) const {
    return app_command(binary, std::move(head), tail);
  }

  std::string secret() const { return env[0].substr(env[0].find('=') + 1); }
  std::string operator_secret() const { return env[1].substr(env[1].find('=') + 1); }
};

}  // namespace troupe::testing
