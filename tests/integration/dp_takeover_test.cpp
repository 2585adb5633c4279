// A standby coordinator for a data-parallel job (--mode dp), with real processes on loopback
// (full Fashion-MNIST, 3 epochs, 2 workers): the primary killed with SIGKILL after epoch 1 is
// replaced by its standby, the workers rejoin it and form a new generation, and the job
// finishes at the accuracy bar with every step and every epoch's examples counted once; a
// primary paused past --takeover-timeout-ms is deposed and stops without touching the report;
// a pause below it causes no takeover.
#define BOOST_TEST_MODULE dp_takeover_test
#include <boost/test/unit_test.hpp>

#include "tests/integration/fmnist_cluster.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

// 60000 training examples, 2 workers x --batch 64 per step: 469 steps an epoch (the last short).
const double steps_per_epoch = std::ceil(full_job_examples() / 128);

fmnist_cluster dp_cluster(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--mode", "dp"});
  return fmnist_cluster{full_job(extra), 0, 2, {}, true};
}

// The standby's report of the finished job: the bar, every step, each epoch's examples once.
void check_finished_job(const std::string& report) {
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
  BOOST_TEST(json_number(report, "steps").value_or(0) == 3 * steps_per_epoch);
  BOOST_TEST(json_strings(report, "workers_lost").empty());
  const auto epochs = report_array(report, "epochs");
  BOOST_TEST_REQUIRE(epochs.size() == 3u);
  for (const auto& e : epochs) BOOST_TEST(e.value("examples", 0.0) == full_job_examples());
}

void check_workers_finish(fmnist_cluster& cluster) {
  for (auto& node : cluster.workers) {
    BOOST_TEST_INFO("worker: " << node->output());
    BOOST_TEST(node->wait(std::chrono::seconds(60)).value_or(-1) == 0);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_killed_dp_coordinator_is_replaced_by_its_standby) {
  // With the optimizer's state whole on each member, or sharded (--zero-stage 1: the pieces
  // are agreed on again in the generation the standby forms).
  for (const char* stage : {"0", "1"}) {
    BOOST_TEST_CONTEXT("--zero-stage " << stage) {
      auto cluster = dp_cluster({"--zero-stage", stage});
      BOOST_TEST_REQUIRE(
          cluster.standby->wait_for_output("following the coordinator", full_job_time));
      BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
      cluster.coordinator->kill();
      const auto code = cluster.standby->wait(full_job_time);
      const std::string out = cluster.standby->output();
      BOOST_TEST_INFO("standby: " << out);
      BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
      BOOST_TEST(out.find("took over as the coordinator of term 1") != std::string::npos);
      const std::string report = read_file(cluster.report.string());
      check_finished_job(report);
      BOOST_TEST(json_number(report, "zero_stage").value_or(-1) == std::stod(stage));
      const auto takeovers = report_array(report, "takeovers");
      BOOST_TEST_REQUIRE(takeovers.size() == 1u);
      BOOST_TEST(takeovers[0].value("term", 0) == 1);
      BOOST_TEST(takeovers[0].value("took_s", -1.0) >= 0);
      const auto losses = report_array(report, "losses");
      BOOST_TEST_REQUIRE(losses.size() == 1u);
      BOOST_TEST(losses[0].value("role", std::string{}) == "coordinator");
      BOOST_TEST(json_number(report, "generations").value_or(0) >= 2);
      check_workers_finish(cluster);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_dp_coordinator_paused_past_the_takeover_timeout_is_deposed) {
  auto cluster = dp_cluster({"--takeover-timeout-ms", "3000"});
  BOOST_TEST_REQUIRE(cluster.standby->wait_for_output("following the coordinator", full_job_time));
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  cluster.coordinator->signal(SIGSTOP);
  BOOST_TEST_REQUIRE(
      cluster.standby->wait_for_output("took over as the coordinator", std::chrono::seconds(60)));
  cluster.coordinator->signal(SIGCONT);
  const auto standby = cluster.standby->wait(full_job_time);
  const auto primary = cluster.coordinator->wait(std::chrono::seconds(60));
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_INFO("standby: " << cluster.standby->output());
  BOOST_TEST_REQUIRE(standby.value_or(-1) == 0);
  BOOST_TEST_REQUIRE(primary.has_value());
  BOOST_TEST(*primary != 0);  // deposed, whether the standby still runs or has finished
  BOOST_TEST(cluster.coordinator->output().find("deposed") != std::string::npos);
  const std::string report = read_file(cluster.report.string());  // the standby's, untouched
  check_finished_job(report);
  BOOST_TEST(report_array(report, "takeovers").size() == 1u);
  check_workers_finish(cluster);
}

BOOST_AUTO_TEST_CASE(a_dp_coordinator_paused_for_5_s_keeps_its_job) {
  auto cluster = dp_cluster({});
  BOOST_TEST_REQUIRE(cluster.standby->wait_for_output("following the coordinator", full_job_time));
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  // The pause's length is the subject (below --takeover-timeout-ms), not a guess at progress.
  cluster.coordinator->signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  cluster.coordinator->signal(SIGCONT);
  const auto primary = cluster.coordinator->wait(full_job_time);
  const auto standby = cluster.standby->wait(std::chrono::seconds(60));
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_INFO("standby: " << cluster.standby->output());
  BOOST_TEST(primary.value_or(-1) == 0);
  BOOST_TEST(standby.value_or(-1) == 0);
  const std::string report = read_file(cluster.report.string());
  check_finished_job(report);
  BOOST_TEST(report_array(report, "takeovers").size() == 0u);
  BOOST_TEST(report_array(report, "losses").size() == 0u);
  check_workers_finish(cluster);
}
