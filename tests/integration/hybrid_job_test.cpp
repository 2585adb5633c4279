// troupe-ctr --mode hybrid: the embedding tables on the servers' buckets (asynchronous,
// staleness counted), the dense tower replicated on the workers and allreduced. Embedded, its
// test AUC comes near the sequential reference's; as 1 coordinator + 2 servers + 2 workers with
// --replication 2 (the tables' rows over the servers' data lanes), kill -9 of a server and
// then of a worker leave a job that completes, every surviving process exiting 0.
#define BOOST_TEST_MODULE hybrid_job
#include <boost/test/unit_test.hpp>

#include "tests/integration/child_process.hpp"
#include "tests/support/pace.hpp"

using namespace troupe::testing;

namespace {

const std::vector<std::string> model = {"--mode",          "hybrid", "--fm-dim",          "4",
                                        "--tower",         "16,8",   "--vocabulary",      "5000",
                                        "--test-examples", "5000",   "--log-level",       "info",
                                        "--blas-threads",  "1",      "--request-timeout", "4"};

std::vector<std::string> command(std::vector<std::string> head,
                                 const std::vector<std::string>& more = {}) {
  head.insert(head.begin(), TROUPE_CTR_BIN);
  head.insert(head.end(), model.begin(), model.end());
  head.insert(head.end(), more.begin(), more.end());
  return head;
}

double number(const std::string& report, const std::string& key) {
  return json_number(report, key).value_or(-1);
}

// An embedded hybrid job of 2 epochs with `flags`: its report, once it exited 0.
std::string embedded_hybrid_job(const std::string& name, const std::vector<std::string>& flags) {
  const auto report = scratch(name + ".json");
  auto more = flags;
  more.insert(more.end(), {"--train-examples", "30000", "--epochs", "2"});
  child_process job(command({"--report", report.string()}, more), scratch(name + ".log").string());
  BOOST_TEST_REQUIRE(job.wait(std::chrono::seconds(240)).value_or(-1) == 0);
  return read_file(report.string());
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_embedded_hybrid_job_reaches_the_reference) {
  // the dense part's optimizer state whole, or sharded (and its gradient too: stage 2)
  for (const char* stage : {"0", "1", "2"}) {
    const auto text =
        embedded_hybrid_job(std::string("hybrid-zero") + stage, {"--zero-stage", stage});
    BOOST_TEST_INFO("--zero-stage " << stage << " report: " << text);
    BOOST_TEST(text.find("\"mode\": \"hybrid\"") != std::string::npos);
    BOOST_TEST(number(text, "zero_stage") == std::stod(stage));
    BOOST_TEST(number(text, "test_auc") > 0.65);
    BOOST_TEST(number(text, "test_auc") >= number(text, "reference_auc") - 0.01);
    BOOST_TEST(number(text, "allreduce_bytes") > 0);  // the tower, allreduced
    BOOST_TEST(number(text, "updates_applied") > 0);  // the rows, pushed to the buckets
    BOOST_TEST(number(text, "staleness.max") >= 0);
    BOOST_TEST(number(text, "checksum_mismatches") == 0);
  }
}

BOOST_AUTO_TEST_CASE(a_hybrid_cluster_survives_a_killed_server_and_a_killed_worker) {
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const auto report = scratch("cluster.json");
  const std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  const auto data = paced_data({"--train-examples", "60000", "--epochs", "4"}, "--train-examples");
  const auto c_log = scratch("c.log").string();
  auto head = job_floor(2);  // the job's floor: 1 ms a step, 469 steps an epoch
  head.insert(head.end(), {"--role", "coordinator", "--listen", address, "--workers", "2",
                           "--servers", "2", "--replication", "2", "--report", report.string()});
  child_process coordinator(command(head, data), c_log, env);
  std::vector<std::unique_ptr<child_process>> servers, workers;
  for (const char* name : {"s0", "s1"})
    servers.push_back(std::make_unique<child_process>(
        command({"--role", "server", "--coordinator", address, "--name", name}, data),
        scratch(std::string(name) + ".log").string(), env));
  for (const char* name : {"w0", "w1"})
    workers.push_back(std::make_unique<child_process>(
        command({"--role", "worker", "--coordinator", address, "--name", name}, data),
        scratch(std::string(name) + ".log").string(), env));
  BOOST_TEST_REQUIRE(await_log(c_log, "epoch 1/4"));
  // The tables' rows go over the servers' data lanes, and through the failover below.
  for (const char* name : {"w0", "w1"})
    BOOST_TEST(read_file(scratch(std::string(name) + ".log").string())
                   .find("the tables' rows go over the data lane to") != std::string::npos);
  servers[1]->kill();
  BOOST_TEST_REQUIRE(await_log(c_log, "lost server 's1'", std::chrono::seconds(60)));
  BOOST_TEST_REQUIRE(await_log(c_log, "epoch 2/4"));
  workers[1]->kill();
  const auto bound = std::chrono::seconds(300);
  BOOST_TEST_INFO("coordinator: " << read_file(c_log));
  BOOST_TEST_REQUIRE(coordinator.wait(bound).value_or(-1) == 0);
  BOOST_TEST(servers[0]->wait(bound).value_or(-1) == 0);
  BOOST_TEST(workers[0]->wait(bound).value_or(-1) == 0);
  const std::string text = read_file(report.string());
  BOOST_TEST_INFO("report: " << text);
  BOOST_TEST(text.find("\"status\": \"finished\"") != std::string::npos);
  BOOST_TEST(text.find("\"w1\"") != std::string::npos);  // in workers_lost
  BOOST_TEST(number(text, "generations") >= 2);
  BOOST_TEST(number(text, "test_auc") > 0.65);
  BOOST_TEST(number(text, "updates_applied") > 0);
}

BOOST_AUTO_TEST_CASE(a_sharded_hybrid_job_checkpoints_its_pieces_and_tables_and_resumes) {
  // Saved under stage 2 (the pieces, then the tables, in one file), resumed under stage 1.
  const auto dir = scratch("hybrid-zero-checkpoints");
  std::filesystem::remove_all(dir);
  const auto saved = embedded_hybrid_job(
      "hybrid-zero-save",
      {"--zero-stage", "2", "--checkpoint-dir", dir.string(), "--checkpoint-every", "41"});
  const auto resumed =
      embedded_hybrid_job("hybrid-zero-resume", {"--zero-stage", "1", "--resume", dir.string()});
  BOOST_TEST_INFO("saved: " << saved << "\nresumed: " << resumed);
  BOOST_TEST(number(resumed, "resumed_from_step") > 0);
  BOOST_TEST(number(resumed, "resumed_from_step") < number(saved, "steps"));
  BOOST_TEST(number(resumed, "steps") == number(saved, "steps"));
  BOOST_TEST(number(resumed, "checksum_mismatches") == 0);
  BOOST_TEST(number(resumed, "test_auc") > 0.65);
  std::filesystem::remove_all(dir);
}
