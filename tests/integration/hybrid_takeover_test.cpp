// A standby coordinator for a hybrid job (--mode hybrid, troupe-ctr), with real processes on
// loopback: 2 servers holding the embedding tables (--replication 2) and 2 workers allreducing
// the dense tower. The standby follows both coordinators of the primary's process (the
// tables' and the group's); the primary killed with SIGKILL after epoch 1 is replaced by it,
// the servers rejoin the new tables' coordinator and the workers the new group, and the job
// finishes with the takeover in the report, no update lost and every process exiting 0.
#define BOOST_TEST_MODULE hybrid_takeover_test
#include <boost/test/unit_test.hpp>

#include <memory>

#include "tests/integration/child_process.hpp"

using namespace troupe::testing;

namespace {

const std::vector<std::string> model = {
    "--mode",           "hybrid", "--fm-dim",         "4",     "--tower",      "16,8",
    "--vocabulary",     "5000",   "--test-examples",  "5000",  "--log-level",  "info",
    "--blas-threads",   "1",      "--train-examples", "30000", "--epochs",     "3"};

std::vector<std::string> command(std::vector<std::string> head) {
  head.insert(head.begin(), TROUPE_CTR_BIN);
  head.insert(head.end(), model.begin(), model.end());
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

}  // namespace

BOOST_AUTO_TEST_CASE(a_killed_hybrid_coordinator_is_replaced_by_its_standby) {
  const std::string primary = "127.0.0.1:" + std::to_string(free_port());
  const std::string second = "127.0.0.1:" + std::to_string(free_port());
  const std::string both = primary + "," + second;
  const auto report = scratch("takeover.json");
  const std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  const std::vector<std::string> job = {"--role",        "coordinator", "--workers", "2",
                                        "--servers",     "2",           "--report",  report.string(),
                                        "--replication", "2"};
  auto with = [](std::vector<std::string> head, const std::vector<std::string>& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  const auto c_log = scratch("c.log").string(), c2_log = scratch("c2.log").string();
  child_process coordinator(command(with(job, {"--listen", primary})), c_log, env);
  child_process standby(command(with(job, {"--listen", second, "--standby-of", primary})), c2_log,
                        env);
  std::vector<std::unique_ptr<child_process>> members;
  for (const char* name : {"s0", "s1"})
    members.push_back(std::make_unique<child_process>(
        command({"--role", "server", "--coordinator", both, "--name", name}),
        scratch(std::string(name) + ".log").string(), env));
  for (const char* name : {"w0", "w1"})
    members.push_back(std::make_unique<child_process>(
        command({"--role", "worker", "--coordinator", both, "--name", name}),
        scratch(std::string(name) + ".log").string(), env));
  BOOST_TEST_REQUIRE(wait_for_text(c2_log, "following the coordinator"));
  BOOST_TEST_REQUIRE(wait_for_text(c_log, "epoch 1/3"));
  coordinator.kill();
  const auto bound = std::chrono::seconds(300);
  const auto code = standby.wait(bound);
  const std::string out = read_file(c2_log);
  BOOST_TEST_INFO("standby: " << out);
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  BOOST_TEST(out.find("took over as the coordinator of term 1") != std::string::npos);
  const std::string text = read_file(report.string());
  BOOST_TEST_INFO("report: " << text);
  BOOST_TEST(text.find("\"status\": \"finished\"") != std::string::npos);
  BOOST_TEST(array_size(text, "takeovers") == 1u);
  BOOST_TEST(array_size(text, "losses") == 1u);  // the old coordinator only
  BOOST_TEST(array_size(text, "workers_lost") == 0u);
  BOOST_TEST(number(text, "test_auc") > 0.65);
  BOOST_TEST(number(text, "updates_applied") > 0);
  BOOST_TEST(number(text, "updates_lost") == 0);
  BOOST_TEST(number(text, "generations") >= 2);
  for (auto& m : members) {
    BOOST_TEST_INFO("member: " << m->output());
    BOOST_TEST(m->wait(std::chrono::seconds(60)).value_or(-1) == 0);
  }
}
