// Failure detection that tells a pause from a death, with real processes on loopback (full
// Fashion-MNIST, 3 epochs): a coordinator stopped with SIGSTOP for 5 s after epoch 1, then for
// 10 s after epoch 2, declares nobody lost when it resumes (its watchers' heartbeats were
// waiting in its socket), while a server stopped until the coordinator declares it lost (no
// heartbeat for 2 s) is replaced by its backup with nothing lost; a data-parallel coordinator
// stopped for 5 s declares no member lost either.
#define BOOST_TEST_MODULE pause_test
#include <boost/test/unit_test.hpp>

#include "tests/integration/fmnist_cluster.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

// The names in the report's `losses` (every member declared lost, with its role and reason).
std::vector<std::string> losses(const std::string& report) {
  std::vector<std::string> names;
  const auto doc = parse_json(report);
  if (doc.is_object() && doc.contains("losses") && doc["losses"].is_array())
    for (const auto& loss : doc["losses"]) names.push_back(loss.value("name", std::string{}));
  return names;
}

// Stops `p` with SIGSTOP for `how_long`, then lets it go on. The length of the pause is what
// these tests are about (shorter or longer than a timeout), not a guess at the job's progress:
// each pause begins at a point of progress, in a job whose floor outlasts it.
void pause_for(child_process& p, std::chrono::seconds how_long) {
  p.signal(SIGSTOP);
  std::this_thread::sleep_for(how_long);
  p.signal(SIGCONT);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_coordinator_paused_for_5_then_10_s_declares_nobody_lost) {
  // Workers hold a few chunks at a time: while the coordinator is stopped, the job stands.
  fmnist_cluster cluster{full_ps_job({}), 2, 2, job_floor(2, 3)};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  pause_for(*cluster.coordinator, std::chrono::seconds(5));
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("this process was not running for"));
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 2/3", full_job_time));
  pause_for(*cluster.coordinator, std::chrono::seconds(10));
  const auto code = cluster.coordinator->wait(full_job_time);
  const std::string out = cluster.coordinator->output();
  BOOST_TEST_INFO("coordinator: " << out);
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  BOOST_TEST(count_of(out, "this process was not running for") >= 2u);
  BOOST_TEST(out.find("no heartbeat") == std::string::npos);
  const std::string report = read_file(cluster.report.string());
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(losses(report).empty());
  BOOST_TEST(json_number(report, "updates_lost").value_or(-1) == 0);
  for (auto* node : {cluster.servers[0].get(), cluster.servers[1].get(), cluster.workers[0].get(),
                     cluster.workers[1].get()})
    BOOST_TEST(node->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(a_server_paused_until_declared_lost_is_replaced_by_its_backup) {
  fmnist_cluster cluster{full_ps_job({"--replication", "2"}), 3};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  // Stopped until it is declared lost: the job cannot end meanwhile (its buckets wait for it).
  cluster.servers[1]->signal(SIGSTOP);
  BOOST_TEST(
      cluster.coordinator->wait_for_output("no heartbeat for 2000 ms", std::chrono::seconds(60)));
  cluster.servers[1]->signal(SIGCONT);
  const auto code = cluster.coordinator->wait(full_job_time);
  const std::string out = cluster.coordinator->output();
  BOOST_TEST_INFO("coordinator: " << out);
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  BOOST_TEST(out.find("no heartbeat for 2000 ms") != std::string::npos);
  const std::string report = read_file(cluster.report.string());
  BOOST_TEST_INFO("report: " << report);
  const auto lost = losses(report);
  BOOST_TEST((lost.size() == 1 && lost[0].rfind("server-1-", 0) == 0));
  BOOST_TEST(json_number(report, "updates_lost").value_or(-1) == 0);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
  // The resumed server learns that it was replaced and stops; it serves nobody.
  BOOST_TEST(cluster.servers[1]->wait(std::chrono::seconds(60)).has_value());
}

BOOST_AUTO_TEST_CASE(a_dp_coordinator_paused_for_5_s_declares_nobody_lost) {
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  const std::filesystem::path report = scratch("pause-dp.json");
  const auto flags = paced_data(full_job({"--mode", "dp", "--epochs", "5"}));
  auto coordinator_flags = job_floor(2, 3);
  coordinator_flags.insert(coordinator_flags.end(),
                           {"--role", "coordinator", "--listen", address, "--workers", "2",
                            "--report", report.string()});
  child_process coordinator(fmnist_command(coordinator_flags, flags),
                            scratch("pause-dp-c.log").string(), env);
  std::vector<std::unique_ptr<child_process>> workers;
  for (int i = 0; i < 2; ++i)
    workers.push_back(std::make_unique<child_process>(
        fmnist_command({"--role", "worker", "--coordinator", address}, flags),
        scratch("pause-dp-w" + std::to_string(i) + ".log").string(), env));
  BOOST_TEST_REQUIRE(coordinator.wait_for_output("epoch 1/5", full_job_time), coordinator.output());
  pause_for(coordinator, std::chrono::seconds(5));
  const auto code = coordinator.wait(full_job_time);
  const std::string out = coordinator.output();
  BOOST_TEST_INFO("coordinator: " << out);
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  BOOST_TEST(out.find("no heartbeat") == std::string::npos);
  BOOST_TEST(json_strings(read_file(report.string()), "workers_lost").empty());
  for (auto& w : workers) BOOST_TEST(w->wait(std::chrono::seconds(60)).value_or(-1) == 0);
}
