// A standby coordinator for a hybrid job (--mode hybrid, troupe-ctr), with real processes on
// loopback: 2 servers holding the embedding tables (--replication 2) and 2 workers allreducing
// the dense tower. The standby follows both coordinators of the primary's process (the
// tables' and the group's); the primary killed with SIGKILL after epoch 1 is replaced by it,
// the servers rejoin the new tables' coordinator and the workers the new group, and the job
// finishes with the takeover in the report, no update lost and every process exiting 0. A
// primary paused past --takeover-timeout-ms is deposed (both of its coordinators) and stops
// without touching the report. A server killed just before the primary (so that the standby's
// standing still names it) is lost at the takeover's deadline, a replacement server is admitted
// and holds copies again, and the job finishes with both workers (issue 40).
#define BOOST_TEST_MODULE hybrid_takeover_test
#include <boost/test/unit_test.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "tests/integration/child_process.hpp"
#include "tests/support/pace.hpp"

using namespace troupe::testing;

namespace {

const std::vector<std::string> model = {
    "--mode",         "hybrid", "--fm-dim",         "4",      "--tower",     "16,8",
    "--vocabulary",   "5000",   "--test-examples",  "5000",   "--log-level", "info",
    "--blas-threads", "1",      "--train-examples", "200000", "--epochs",    "3"};

std::vector<std::string> command(std::vector<std::string> head) {
  const auto data = paced_data(model, "--train-examples");
  head.insert(head.begin(), TROUPE_CTR_BIN);
  head.insert(head.end(), data.begin(), data.end());
  return head;
}

double number(const std::string& report, const std::string& key) {
  return json_number(report, key).value_or(-1);
}

size_t array_size(const std::string& report, const std::string& key) {
  const auto doc = parse_json(report);
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_array()) return 0;
  return doc[key].size();
}

// A coordinator, its standby, `servers` servers and 2 workers; `extra` goes to every process.
struct hybrid_cluster {
  std::string primary = "127.0.0.1:" + std::to_string(free_port());
  std::string second = "127.0.0.1:" + std::to_string(free_port());
  std::string tag = primary.substr(10);
  std::filesystem::path report = scratch("takeover-" + tag + ".json");
  std::string c_log = scratch("c-" + tag + ".log").string();
  std::string c2_log = scratch("c2-" + tag + ".log").string();
  std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  std::unique_ptr<child_process> coordinator, standby;
  std::vector<std::unique_ptr<child_process>> members;
  std::vector<std::string> extra;

  std::vector<std::string> with(std::vector<std::string> head) const {
    head.insert(head.end(), extra.begin(), extra.end());
    return command(head);
  }

  // A server (named s<i>) following both coordinators.
  child_process& start_server(size_t i) {
    const std::string name = fmt::format("s{}-{}", i, tag);
    members.push_back(std::make_unique<child_process>(
        with({"--role", "server", "--coordinator", primary + "," + second, "--name", name}),
        scratch(name + ".log").string(), env));
    return *members.back();
  }

  explicit hybrid_cluster(std::vector<std::string> extra_flags = {}, int servers = 2)
      : extra(std::move(extra_flags)) {
    // The job's floor: 1 ms a step, two epochs of 1563 steps after the first (3 s).
    auto job = job_floor(2);
    job.insert(job.end(),
               {"--role", "coordinator", "--workers", "2", "--servers", std::to_string(servers),
                "--report", report.string(), "--replication", "2"});
    auto coordinating = [&](std::vector<std::string> tail) {
      tail.insert(tail.begin(), job.begin(), job.end());
      return with(tail);
    };
    coordinator = std::make_unique<child_process>(coordinating({"--listen", primary}), c_log, env);
    standby = std::make_unique<child_process>(
        coordinating({"--listen", second, "--standby-of", primary}), c2_log, env);
    const std::string both = primary + "," + second;
    for (int i = 0; i < servers; ++i) start_server(i);
    for (const std::string name : {"w0", "w1"})
      members.push_back(std::make_unique<child_process>(
          with({"--role", "worker", "--coordinator", both, "--name", name + "-" + tag}),
          scratch(name + "-" + tag + ".log").string(), env));
  }
};

// The standby's report of the finished job (the old coordinator and `servers_lost` servers
// lost, no worker), and the exit of every member not killed.
void check_finished(hybrid_cluster& cluster, size_t servers_lost = 0) {
  const std::string text = read_file(cluster.report.string());
  BOOST_TEST_INFO("report: " << text);
  BOOST_TEST(text.find("\"status\": \"finished\"") != std::string::npos);
  BOOST_TEST(array_size(text, "takeovers") == 1u);
  BOOST_TEST(array_size(text, "losses") == 1u + servers_lost);
  BOOST_TEST(array_size(text, "workers_lost") == 0u);
  BOOST_TEST(number(text, "test_auc") > 0.65);
  BOOST_TEST(number(text, "updates_applied") > 0);
  BOOST_TEST(number(text, "updates_lost") == 0);
  BOOST_TEST(number(text, "generations") >= 2);
  for (auto& m : cluster.members) {
    if (m->killed()) continue;
    BOOST_TEST_INFO("member: " << m->output());
    BOOST_TEST(m->wait(std::chrono::seconds(60)).value_or(-1) == 0);
  }
}

const auto bound = std::chrono::seconds(300);

}  // namespace

BOOST_AUTO_TEST_CASE(a_killed_hybrid_coordinator_is_replaced_by_its_standby) {
  hybrid_cluster cluster;
  BOOST_TEST_REQUIRE(await_log(cluster.c2_log, "following the coordinator"));
  BOOST_TEST_REQUIRE(await_log(cluster.c_log, "epoch 1/3"));
  cluster.coordinator->kill();
  const auto code = cluster.standby->wait(bound);
  const std::string out = read_file(cluster.c2_log);
  BOOST_TEST_INFO("standby: " << out);
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  BOOST_TEST(out.find("took over as the coordinator of term 1") != std::string::npos);
  check_finished(cluster);
}

BOOST_AUTO_TEST_CASE(a_hybrid_coordinator_paused_past_the_takeover_timeout_is_deposed) {
  hybrid_cluster cluster({"--takeover-timeout-ms", "3000"});
  BOOST_TEST_REQUIRE(await_log(cluster.c2_log, "following the coordinator"));
  BOOST_TEST_REQUIRE(await_log(cluster.c_log, "epoch 1/3"));
  cluster.coordinator->signal(SIGSTOP);
  BOOST_TEST_REQUIRE(
      await_log(cluster.c2_log, "took over as the coordinator", std::chrono::seconds(60)));
  cluster.coordinator->signal(SIGCONT);
  const auto standby = cluster.standby->wait(bound);
  const auto primary = cluster.coordinator->wait(std::chrono::seconds(60));
  BOOST_TEST_INFO("coordinator: " << read_file(cluster.c_log));
  BOOST_TEST_INFO("standby: " << read_file(cluster.c2_log));
  BOOST_TEST_REQUIRE(standby.value_or(-1) == 0);
  BOOST_TEST_REQUIRE(primary.has_value());
  BOOST_TEST(*primary != 0);  // deposed, whether the standby still runs or has finished
  BOOST_TEST(read_file(cluster.c_log).find("deposed") != std::string::npos);
  check_finished(cluster);  // the standby's report, untouched by the old primary
}

BOOST_AUTO_TEST_CASE(a_server_lost_just_before_a_takeover_is_forgotten_and_replaced) {
  hybrid_cluster cluster({"--takeover-timeout-ms", "3000"});
  BOOST_TEST_REQUIRE(await_log(cluster.c2_log, "following the coordinator"));
  BOOST_TEST_REQUIRE(await_log(cluster.c_log, "epoch 1/3"));
  // The server first, then at once the primary: its standby's standing still names the server.
  cluster.members[1]->kill();
  cluster.coordinator->kill();
  BOOST_TEST_REQUIRE(
      await_log(cluster.c2_log, "took over as the coordinator", std::chrono::seconds(60)));
  BOOST_TEST(read_file(cluster.c2_log).find(fmt::format("lost server 's1-{}'", cluster.tag)) !=
             std::string::npos);
  // A replacement is admitted by the coordinator that took over and holds copies again.
  cluster.start_server(2);
  BOOST_TEST_REQUIRE(
      await_log(cluster.c2_log, fmt::format("server 's2-{}' joined the running job", cluster.tag)));
  BOOST_TEST_REQUIRE(await_log(cluster.c2_log, fmt::format("onto server 's2-{}'", cluster.tag)));
  const auto code = cluster.standby->wait(bound);
  BOOST_TEST_INFO("standby: " << read_file(cluster.c2_log));
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  check_finished(cluster, 1);
}
