// Whole jobs of troupe-fmnist on a Fashion-MNIST subset: embedded in one process, and as five
// processes on loopback with a sixth that has the wrong secret (and nodes serving metrics that
// promtool accepts). Each test starts every process it needs and kills whatever is left when
// it ends.
#define BOOST_TEST_MODULE fmnist_job
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/integration/fmnist_cluster.hpp"

using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

const std::string binary = TROUPE_FMNIST_BIN;
const std::vector<std::string> subset = {"--train-limit", "6000", "--test-limit",   "2000",
                                         "--epochs",      "2",    "--blas-threads", "1",
                                         "--log-level",   "warn"};

std::vector<std::string> command(std::vector<std::string> head) {
  return fmnist_command(std::move(head), paced_data(subset));
}

void check_report(const std::string& path, double min_accuracy) {
  const std::string report = read_file(path);
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= min_accuracy);
  BOOST_TEST(json_number(report, "steps").value_or(0) > 0);
  BOOST_TEST(json_number(report, "updates_applied").value_or(0) > 0);
  BOOST_TEST(json_number(report, "updates_rejected").value_or(-1) == 0);
  BOOST_TEST(json_number(report, "restarts").value_or(-1) == 0);
  BOOST_TEST(report.find("\"max_staleness\":") != std::string::npos);
  BOOST_TEST(report.find("\"epoch\": 2") != std::string::npos);
}

}  // namespace

BOOST_AUTO_TEST_CASE(embedded_job_trains_and_reports) {
  const auto report = scratch("embedded.json");
  child_process job(command({"--report", report.string()}), scratch("embedded.log").string());
  BOOST_TEST_REQUIRE(job.started());
  const auto code = job.wait(std::chrono::seconds(240));
  BOOST_TEST_INFO("output: " << job.output());
  BOOST_TEST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0);
  check_report(report.string(), 0.70);
}

BOOST_AUTO_TEST_CASE(the_mlps_hidden_widths_are_a_flag_and_bad_ones_are_refused) {
  // Three hidden layers (784-128-64-32-10): the forward and backward passes of any depth learn.
  const auto report = scratch("hidden.json");
  child_process job(command({"--hidden", "128,64,32", "--report", report.string()}),
                    scratch("hidden.log").string());
  BOOST_TEST_REQUIRE(job.wait(std::chrono::seconds(240)).value_or(-1) == 0, job.output());
  check_report(report.string(), 0.70);
  child_process bad(command({"--hidden", "128,0"}), scratch("hidden-bad.log").string());
  BOOST_TEST(bad.wait(std::chrono::seconds(60)).value_or(0) != 0);
  BOOST_TEST(bad.output().find("--hidden takes widths 1 to 65536") != std::string::npos,
             bad.output());
}

// Runs the embedded job with extra flags and returns the report's text.
std::string embedded_report(const std::string& name, std::vector<std::string> flags) {
  const auto report = scratch(name + ".json");
  flags.insert(flags.end(), {"--report", report.string()});
  child_process job(command(std::move(flags)), scratch(name + ".log").string());
  const auto code = job.wait(std::chrono::seconds(240));
  BOOST_TEST_INFO("output: " << job.output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  return read_file(report.string());
}

BOOST_AUTO_TEST_CASE(ssp_keeps_every_worker_within_its_bound) {
  const std::string report =
      embedded_report("ssp", {"--workers", "3", "--consistency", "ssp:1", "--dc", "dcasgd:0.04"});
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "max_clock_gap").value_or(99) <= 1);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= 0.70);
}

BOOST_AUTO_TEST_CASE(bsp_applies_every_gradient_fresh) {
  const std::string report = embedded_report("bsp", {"--workers", "3", "--consistency", "bsp"});
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "max_staleness").value_or(99) == 0);
  BOOST_TEST(json_number(report, "max_clock_gap").value_or(99) == 0);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= 0.70);
}

BOOST_AUTO_TEST_CASE(a_slow_worker_does_fewer_batches_under_async) {
  const std::string report =
      embedded_report("straggler", {"--workers", "2", "--worker-delay-ms", "1:15"});
  BOOST_TEST_INFO("report: " << report);
  // Ranks follow join order, so read both workers' steps and compare the larger with the smaller.
  std::vector<double> steps;
  for (size_t at = report.find("\"steps\":", report.find("\"workers\"")); at != std::string::npos;
       at = report.find("\"steps\":", at + 1))
    steps.push_back(std::stod(report.substr(at + 8)));
  BOOST_TEST_REQUIRE(steps.size() == 2u);
  BOOST_TEST(std::max(steps[0], steps[1]) > 2 * std::min(steps[0], steps[1]));
  // 2 epochs of 6000 examples (a third at the fast pace) in batches of 64.
  BOOST_TEST(steps[0] + steps[1] == 2 * std::ceil(paced_count(6000) / 64.0));
}

BOOST_AUTO_TEST_CASE(five_processes_train_and_a_wrong_secret_is_refused) {
  const std::string port = std::to_string(free_port());
  const std::string address = "127.0.0.1:" + port;
  const auto report = scratch("distributed.json");
  const std::vector<std::string> good_secret = {"TROUPE_SECRET=correct horse"};
  child_process coordinator(command({"--role", "coordinator", "--listen", address, "--workers", "2",
                                     "--servers", "2", "--report", report.string()}),
                            scratch("coordinator.log").string(), good_secret);
  std::vector<std::unique_ptr<child_process>> nodes;
  for (const char* role : {"server", "server", "worker", "worker"}) {
    const std::string name = std::string(role) + "-" + std::to_string(nodes.size());
    nodes.push_back(std::make_unique<child_process>(
        command({"--role", role, "--coordinator", address, "--name", name}),
        scratch(name + ".log").string(), good_secret));
  }
  child_process intruder(command({"--role", "worker", "--coordinator", address}),
                         scratch("intruder.log").string(), {"TROUPE_SECRET=battery staple"});

  const auto intruder_code = intruder.wait(std::chrono::seconds(60));
  BOOST_TEST_INFO("intruder: " << intruder.output());
  BOOST_TEST_REQUIRE(intruder_code.has_value());
  BOOST_TEST(*intruder_code != 0);
  BOOST_TEST(intruder.output().find("secret") != std::string::npos);

  const auto code = coordinator.wait(std::chrono::seconds(300));
  BOOST_TEST_INFO("coordinator: " << coordinator.output());
  BOOST_TEST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0);
  for (auto& node : nodes) {
    const auto node_code = node->wait(std::chrono::seconds(30));
    BOOST_TEST_INFO("node: " << node->output());
    BOOST_TEST_REQUIRE(node_code.has_value());
    BOOST_TEST(*node_code == 0);
  }
  check_report(report.string(), 0.70);
  // Every process's peak memory: the coordinator's, and each server's and worker's (from its
  // heartbeats).
  const auto parsed = parse_json(read_file(report.string()));
  BOOST_TEST(parsed.value("coordinator_peak_rss_mb", 0.0) > 1.0);
  BOOST_TEST_REQUIRE(parsed["servers"].size() == 2u);
  for (const char* list : {"servers", "workers"})
    for (const auto& node : parsed[list])
      BOOST_TEST(node.value("peak_rss_mb", 0.0) > 1.0, node.dump());
}

// A coordinator, two servers and two workers on the subset, for the fault tests below; each
// worker waits `floor_ms` a batch (47 batches an epoch), the job's floor.
struct small_cluster : fmnist_cluster {
  explicit small_cluster(const std::string& epochs, uint32_t floor_ms = 1)
      : fmnist_cluster(with_epochs(epochs), 2, 2, job_floor(2, floor_ms)) {}

  static std::vector<std::string> with_epochs(const std::string& epochs) {
    auto flags = subset;
    flags.insert(flags.end(), {"--epochs", epochs});
    return flags;
  }
};

BOOST_AUTO_TEST_CASE(a_lost_worker_is_reported_and_the_job_goes_on) {
  small_cluster cluster{"20"};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/20", std::chrono::seconds(120)));
  cluster.workers[1]->kill();
  const auto code = cluster.coordinator->wait(std::chrono::seconds(300));
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0);
  const std::string report = read_file(cluster.report.string());
  const auto lost = json_strings(report, "workers_lost");
  BOOST_TEST((lost.size() == 1 && lost[0].rfind("worker-1-", 0) == 0), report);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= 0.70);
  BOOST_TEST(cluster.workers[0]->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(a_frozen_worker_is_found_by_heartbeats_and_the_job_goes_on) {
  // SIGSTOP keeps the worker's connection open, so only missing heartbeats can tell.
  small_cluster cluster{"20"};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/20", std::chrono::seconds(120)));
  cluster.workers[1]->signal(SIGSTOP);
  const auto code = cluster.coordinator->wait(std::chrono::seconds(300));
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0);
  BOOST_TEST(cluster.coordinator->output().find("no heartbeat for 2000 ms") != std::string::npos);
  const std::string report = read_file(cluster.report.string());
  const auto lost = json_strings(report, "workers_lost");
  BOOST_TEST((lost.size() == 1 && lost[0].rfind("worker-1-", 0) == 0), report);
  BOOST_TEST(cluster.workers[0]->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(a_lost_server_fails_the_job_and_every_process_says_so) {
  small_cluster cluster{"50"};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/50", std::chrono::seconds(120)));
  cluster.servers[1]->kill();
  const auto code = cluster.coordinator->wait(std::chrono::seconds(120));
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 1);
  BOOST_TEST(cluster.coordinator->output().find("lost server") != std::string::npos);
  for (auto* node :
       {cluster.servers[0].get(), cluster.workers[0].get(), cluster.workers[1].get()}) {
    const auto node_code = node->wait(std::chrono::seconds(60));
    BOOST_TEST_INFO("node: " << node->output());
    BOOST_TEST_REQUIRE(node_code.has_value());
    BOOST_TEST(*node_code != 0);
    // Told by the coordinator, or a worker that found the bucket gone first: either says why.
    const std::string out = node->output();
    BOOST_TEST(
        (out.find("lost server") != std::string::npos || out.find("bucket") != std::string::npos));
  }
}

BOOST_AUTO_TEST_CASE(a_worker_joining_a_running_job_starts_cold_and_takes_work) {
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const auto report = scratch("late.json");
  const std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  auto args = [&](std::vector<std::string> head) {
    head = command(std::move(head));
    head.insert(head.end(), {"--epochs", "8", "--consistency", "ssp:2"});
    return head;
  };
  // A floor of 3 ms a batch (seven epochs of 94 to go: 2 s) outlasts the newcomer's start.
  auto coordinator_flags = job_floor(2, 3);
  coordinator_flags.insert(coordinator_flags.end(),
                           {"--role", "coordinator", "--listen", address, "--workers", "1",
                            "--max-workers", "2", "--servers", "1", "--report", report.string()});
  child_process coordinator(args(coordinator_flags), scratch("late-c.log").string(), env);
  child_process server(args({"--role", "server", "--coordinator", address}),
                       scratch("late-s.log").string(), env);
  child_process first(args({"--role", "worker", "--coordinator", address, "--name", "first"}),
                      scratch("late-w1.log").string(), env);
  BOOST_TEST_REQUIRE(coordinator.wait_for_output("epoch 1/8", std::chrono::seconds(120)));
  child_process late(args({"--role", "worker", "--coordinator", address, "--name", "late"}),
                     scratch("late-w2.log").string(), env);
  const auto code = coordinator.wait(std::chrono::seconds(300));
  BOOST_TEST_INFO("coordinator: " << coordinator.output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  const std::string text = read_file(report.string());
  BOOST_TEST_INFO("report: " << text);
  double late_steps = 0;  // the newcomer did part of the work
  for (const auto& w : parse_json(text).value("workers", troupe::json::array()))
    if (w.value("name", "") == "late") late_steps = w.value("steps", 0.0);
  BOOST_TEST(late_steps > 0);
  BOOST_TEST(json_number(text, "max_clock_gap").value_or(99) <= 2);
  for (auto* node : {&server, &first, &late})
    BOOST_TEST(node->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(every_node_serves_metrics_that_promtool_accepts) {
  auto flags = small_cluster::with_epochs("4");
  flags.insert(flags.end(), {"--metrics-port", "0", "--log-level", "info"});
  // A floor of 5 ms a batch: the three epochs after the first (0.7 s) outlast one read.
  fmnist_cluster cluster{flags, 2, 2, job_floor(2, 5)};
  const auto port = await_metrics_port(cluster.servers[0]->log_path(), std::chrono::seconds(60));
  BOOST_TEST_REQUIRE(port.has_value());
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/4", std::chrono::seconds(120)));
  const std::string response = http_get(*port, "/metrics");
  BOOST_TEST_INFO("response: " << response);
  BOOST_TEST_REQUIRE(response.rfind("HTTP/1.0 200 OK", 0) == 0u);
  BOOST_TEST(response.find("troupe_bucket_updates_total{bucket=") != std::string::npos);
  BOOST_TEST(response.find("troupe_push_staleness_bucket{bucket=") != std::string::npos);
  const auto body = scratch("metrics.txt");
  std::ofstream(body) << response.substr(response.find("\r\n\r\n") + 4);
  if (::access("/usr/bin/promtool", X_OK) == 0)
    BOOST_TEST(std::system(("/usr/bin/promtool check metrics < " + body.string()).c_str()) == 0);
  else
    BOOST_TEST_MESSAGE("promtool is not installed: format checked by metrics_test only");
  BOOST_TEST(cluster.coordinator->wait(std::chrono::seconds(240)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(a_non_loopback_listen_address_needs_insecure) {
  child_process job({binary, "--role", "coordinator", "--listen", "0.0.0.0:7600", "--secret", "s"},
                    scratch("insecure.log").string());
  const auto code = job.wait(std::chrono::seconds(30));
  BOOST_TEST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 2);
  BOOST_TEST(job.output().find("--insecure") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_worker_without_a_coordinator_gives_up_with_a_clear_message) {
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  child_process job(command({"--role", "worker", "--coordinator", address, "--secret", "s",
                             "--join-timeout", "1"}),
                    scratch("lonely.log").string());
  const auto code = job.wait(std::chrono::seconds(60));
  BOOST_TEST_INFO("output: " << job.output());
  BOOST_TEST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 1);
  BOOST_TEST(job.output().find("cannot reach the coordinator") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(members_given_a_list_join_the_first_coordinator_that_answers) {
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const std::string list = "127.0.0.1:" + std::to_string(free_port()) + "," + address;
  const std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  child_process coordinator(
      command({"--role", "coordinator", "--listen", address, "--servers", "1", "--workers", "1"}),
      scratch("list-c.log").string(), env);
  child_process server(command({"--role", "server", "--coordinator", list}),
                       scratch("list-s.log").string(), env);
  // The environment variable takes the same list.
  auto worker_env = env;
  worker_env.push_back("TROUPE_COORDINATOR=" + list);
  child_process worker(command({"--role", "worker"}), scratch("list-w.log").string(), worker_env);
  const auto code = coordinator.wait(std::chrono::seconds(300));
  BOOST_TEST_INFO("coordinator: " << coordinator.output() << "\nworker: " << worker.output());
  BOOST_TEST(code.value_or(-1) == 0);
  BOOST_TEST(worker.wait(std::chrono::seconds(30)).value_or(-1) == 0);
  BOOST_TEST(server.wait(std::chrono::seconds(30)).value_or(-1) == 0);
}
