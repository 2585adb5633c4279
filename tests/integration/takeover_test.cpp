// A standby coordinator, with real processes on loopback (full Fashion-MNIST, 3 epochs): the
// primary coordinator killed with SIGKILL mid-job is replaced by its standby, the members
// rejoin it, and the job finishes with nothing lost and the takeover in the report written by
// the new coordinator; a primary paused for 5 s (below --takeover-timeout-ms) keeps its job,
// and exactly one coordinator finishes it.
#define BOOST_TEST_MODULE takeover_test
#include <boost/test/unit_test.hpp>

#include "tests/integration/fmnist_cluster.hpp"

using namespace troupe;
using namespace troupe::testing;

BOOST_AUTO_TEST_CASE(a_killed_coordinator_is_replaced_by_its_standby_and_nothing_is_lost) {
  fmnist_cluster cluster{full_ps_job({"--replication", "2"}), 3, 2, {}, true};
  BOOST_TEST_REQUIRE(cluster.standby->wait_for_output("following the coordinator", full_job_time));
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  cluster.coordinator->kill();
  const auto code = cluster.standby->wait(full_job_time);
  const std::string out = cluster.standby->output();
  BOOST_TEST_INFO("standby: " << out);
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  BOOST_TEST(out.find("took over as the coordinator of term 1") != std::string::npos);
  const std::string report = read_file(cluster.report.string());
  check_every_update_applied_once(report);
  const auto takeovers = report_array(report, "takeovers");
  BOOST_TEST_REQUIRE(takeovers.size() == 1u);
  BOOST_TEST(takeovers[0].value("term", 0) == 1);
  BOOST_TEST(takeovers[0].value("took_s", -1.0) >= 0);
  const auto losses = report_array(report, "losses");
  BOOST_TEST_REQUIRE(losses.size() == 1u);
  BOOST_TEST(losses[0].value("role", std::string{}) == "coordinator");
  for (auto& node : cluster.servers)
    BOOST_TEST(node->wait(std::chrono::seconds(30)).value_or(-1) == 0);
  for (auto& node : cluster.workers)
    BOOST_TEST(node->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(a_coordinator_paused_for_5_s_keeps_its_job_and_one_coordinator_finishes) {
  fmnist_cluster cluster{full_ps_job({"--replication", "2"}), 3, 2, {}, true};
  BOOST_TEST_REQUIRE(cluster.standby->wait_for_output("following the coordinator", full_job_time));
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  // The pause's length is what the test is about (below --takeover-timeout-ms); with the
  // coordinator stopped the job stands, so it cannot end during it.
  cluster.coordinator->signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  cluster.coordinator->signal(SIGCONT);
  const auto primary = cluster.coordinator->wait(full_job_time);
  const auto standby = cluster.standby->wait(std::chrono::seconds(60));
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_INFO("standby: " << cluster.standby->output());
  BOOST_TEST_REQUIRE(primary.has_value());
  BOOST_TEST_REQUIRE(standby.has_value());
  const std::string report = read_file(cluster.report.string());
  check_every_update_applied_once(report);
  const auto takeovers = report_array(report, "takeovers");
  // Below --takeover-timeout-ms: no takeover, the primary finishes and its standby stops with it.
  BOOST_TEST(takeovers.size() == 0u);
  BOOST_TEST(*primary == 0);
  BOOST_TEST(*standby == 0);
  BOOST_TEST(report_array(report, "losses").size() == 0u);
}

BOOST_AUTO_TEST_CASE(a_coordinator_paused_past_the_takeover_timeout_is_deposed_cleanly) {
  // --takeover-timeout-ms 3000: the standby and the members give the paused primary up after
  // 3 s; once it resumes it learns it was deposed and stops without touching the job.
  fmnist_cluster cluster{
      full_ps_job({"--replication", "2", "--takeover-timeout-ms", "3000"}), 3, 2, {}, true};
  BOOST_TEST_REQUIRE(cluster.standby->wait_for_output("following the coordinator", full_job_time));
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  cluster.coordinator->signal(SIGSTOP);
  BOOST_TEST_REQUIRE(
      cluster.standby->wait_for_output("took over as the coordinator", std::chrono::seconds(60)));
  cluster.coordinator->signal(SIGCONT);
  const auto primary = cluster.coordinator->wait(std::chrono::seconds(60));
  const auto standby = cluster.standby->wait(full_job_time);
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_INFO("standby: " << cluster.standby->output());
  BOOST_TEST_REQUIRE(primary.has_value());
  BOOST_TEST(*primary != 0);  // deposed
  BOOST_TEST(cluster.coordinator->output().find("deposed") != std::string::npos);
  BOOST_TEST_REQUIRE(standby.value_or(-1) == 0);
  const std::string report = read_file(cluster.report.string());
  check_every_update_applied_once(report);
  BOOST_TEST(report_array(report, "takeovers").size() == 1u);
  for (auto& node : cluster.servers)
    BOOST_TEST(node->wait(std::chrono::seconds(30)).value_or(-1) == 0);
  for (auto& node : cluster.workers)
    BOOST_TEST(node->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}
