// troupe-ctr end to end on a small click log: embedded, and as three processes on loopback
// (coordinator, server, worker), each reaching an AUC near the ground-truth model's own and
// near the reference's (the same model trained sequentially), with and without a dense tower;
// --reference=false skips the reference.
#define BOOST_TEST_MODULE ctr_job
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>

#include "tests/integration/child_process.hpp"

using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

const std::string binary = TROUPE_CTR_BIN;
const std::vector<std::string> small_log = {"--train-examples", "30000", "--test-examples", "5000",
                                            "--vocabulary",     "5000",  "--epochs",        "3",
                                            "--log-level",      "warn",  "--blas-threads",  "1"};

std::vector<std::string> command(std::vector<std::string> head) {
  head.insert(head.begin(), binary);
  head.insert(head.end(), small_log.begin(), small_log.end());
  return head;
}

void check_report(const std::string& path) {
  const std::string report = read_file(path);
  BOOST_TEST_INFO("report: " << report);
  const double test_auc = json_number(report, "test_auc").value_or(0);
  const double truth_auc = json_number(report, "truth_auc").value_or(0);
  BOOST_TEST(truth_auc > 0.7);
  BOOST_TEST(test_auc > 0.65);
  BOOST_TEST(test_auc > truth_auc - 0.1);
  BOOST_TEST(json_number(report, "test_logloss").value_or(9) < 0.7);
  BOOST_TEST(json_number(report, "updates_rejected").value_or(-1) == 0);
  // --reference (on by default): the same model trained sequentially in the coordinator.
  const double reference_auc = json_number(report, "reference_auc").value_or(0);
  BOOST_TEST(reference_auc > 0.65);
  BOOST_TEST(std::abs(test_auc - reference_auc) < 0.03);
}

}  // namespace

BOOST_AUTO_TEST_CASE(embedded_ctr_job_learns_the_click_model) {
  const auto report = scratch("embedded.json");
  child_process job(command({"--report", report.string(), "--fm-dim", "2", "--clip", "5"}),
                    scratch("embedded.log").string());
  const auto code = job.wait(std::chrono::seconds(240));
  BOOST_TEST_INFO("output: " << job.output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  check_report(report.string());
}

BOOST_AUTO_TEST_CASE(three_process_ctr_job_learns_the_click_model) {
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const auto report = scratch("distributed.json");
  const std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  child_process coordinator(command({"--role", "coordinator", "--listen", address, "--workers", "1",
                                     "--servers", "1", "--report", report.string()}),
                            scratch("c.log").string(), env);
  child_process server(command({"--role", "server", "--coordinator", address}),
                       scratch("s.log").string(), env);
  child_process worker(command({"--role", "worker", "--coordinator", address}),
                       scratch("w.log").string(), env);
  const auto code = coordinator.wait(std::chrono::seconds(300));
  BOOST_TEST_INFO("coordinator: " << coordinator.output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  BOOST_TEST(server.wait(std::chrono::seconds(30)).value_or(-1) == 0);
  BOOST_TEST(worker.wait(std::chrono::seconds(30)).value_or(-1) == 0);
  check_report(report.string());
}

BOOST_AUTO_TEST_CASE(reference_false_trains_no_reference) {
  const auto report = scratch("no-reference.json");
  child_process job(command({"--report", report.string(), "--reference=false"}),
                    scratch("no-reference.log").string());
  BOOST_TEST_REQUIRE(job.wait(std::chrono::seconds(240)).value_or(-1) == 0);
  const std::string text = read_file(report.string());
  BOOST_TEST(json_number(text, "test_auc").value_or(0) > 0.6);
  BOOST_TEST(!json_number(text, "reference_auc").has_value());
}

BOOST_AUTO_TEST_CASE(a_ctr_model_with_a_dense_tower_learns_the_click_model) {
  const auto report = scratch("tower.json");
  child_process job(command({"--report", report.string(), "--fm-dim", "4", "--tower", "16,8"}),
                    scratch("tower.log").string());
  BOOST_TEST_INFO("output: " << job.output());
  BOOST_TEST_REQUIRE(job.wait(std::chrono::seconds(240)).value_or(-1) == 0);
  check_report(report.string());
}
