// Models of real size through every fault a job meets, CI-sized: troupe-fmnist's MLP with hidden
// widths 4096,4096 (20 M parameters, 80 MB: five times the codec's 16 MiB message cap) in
// --mode ps and --mode dp, and troupe-ctr's tower 4096,4096 (17 M dense parameters, 67 MB, and
// the embedding tables on a server) in --mode hybrid, at most 20 steps a job. Each mode's first
// job has a worker killed and a joiner (a state hand-over of the whole model), and writes
// checkpoints (hybrid: the model's state and the tables' buckets in one file); in dp the primary
// coordinator is also killed under a standby. A second job resumes from the first's newest
// checkpoint and finishes. The usual checks hold: in ps every push applied exactly once, in dp
// and hybrid every example used once per epoch and the members' checksums equal. (Python's
// models of this size: tests/python/test_size_ladder.py.)
#define BOOST_TEST_MODULE size_ladder
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>

#include "tests/integration/fmnist_cluster.hpp"

using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

// 18 steps of 32 examples in one epoch (a third of them at the fast pace), checkpoints after
// steps 7 and 14; each worker waits 300 ms a step, so that the steps left after the first
// checkpoint outlast a joiner's start.
constexpr uint32_t steps = 18;
const std::vector<std::string> model = {"--hidden",     "4096,4096", "--epochs",       "1",
                                        "--test-limit", "300",       "--blas-threads", "1"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<std::string> checkpoints_in(const fs::path& dir) {
  return {"--checkpoint-dir", dir.string(), "--checkpoint-every", "7"};
}

// The joiner (worker `name`'s process, the third) took steps of the job.
void check_joiner_stepped(const std::string& report) {
  const auto workers = report_array(report, "workers");
  bool stepped = false;
  for (const auto& w : workers)
    stepped =
        stepped || (w.value("name", "").rfind("worker-2-", 0) == 0 && w.value("steps", 0) > 0);
  BOOST_TEST(stepped);
}

void check_exits(std::vector<std::unique_ptr<child_process>>& nodes, size_t killed = SIZE_MAX) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i == killed) continue;
    BOOST_TEST_INFO("node " << i << ": " << nodes[i]->output());
    BOOST_TEST(nodes[i]->wait(std::chrono::seconds(120)).value_or(-1) == 0);
  }
}

// Once `job` has written a checkpoint: its second worker killed and a joiner started; then the
// job runs to its end, every process but the killed one exiting 0. Its report.
std::string kill_join_and_finish(fmnist_cluster& job) {
  BOOST_TEST_REQUIRE(job.coordinator->wait_for_output("checkpoint after step "));
  job.workers[1]->kill();
  job.start_worker();  // takes the whole model's state in pieces
  BOOST_TEST_INFO("coordinator: " << job.coordinator->output());
  BOOST_TEST_REQUIRE(job.coordinator->wait(std::chrono::seconds(300)).value_or(-1) == 0);
  check_exits(job.workers, 1);
  check_exits(job.servers);
  return read_file(job.report.string());
}

// The hybrid jobs' binary and model: the embedding tables on the servers, the tower's dense
// parameters (4096 x 4096 and the rest: 67 MB) on the members.
const std::string ctr_bin = TROUPE_CTR_BIN;
const std::vector<std::string> ctr_model = {
    "--mode",   "hybrid", "--fm-dim",        "4",    "--tower",          "4096,4096",
    "--epochs", "1",      "--test-examples", "500",  "--blas-threads",   "1",
    "--batch",  "16",     "--vocabulary",    "5000", "--reference=false"};

// A job of `servers` servers (0: dp) and 2 workers resumed from the newest checkpoint in `dir`
// (one after step 7 or later), run to its end; its report.
std::string resume_from(const fs::path& dir, const std::vector<std::string>& flags,
                        uint32_t servers, const std::string& program = TROUPE_FMNIST_BIN,
                        const std::string& data_flag = "--train-limit") {
  fmnist_cluster resumed(flags, servers, 2,
                         {"--checkpoint-dir", dir.string(), "--resume", dir.string()}, false,
                         program, data_flag);
  BOOST_TEST_INFO("coordinator: " << resumed.coordinator->output());
  BOOST_TEST_REQUIRE(resumed.coordinator->wait(std::chrono::seconds(300)).value_or(-1) == 0);
  check_exits(resumed.workers);
  const auto report = read_file(resumed.report.string());
  BOOST_TEST(json_number(report, "resumed_from_step").value_or(0) >= 7, report);
  return report;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_ps_job_of_80_mb_survives_a_kill_takes_a_joiner_and_resumes) {
  const auto dir = scratch("ladder-ps");
  fs::remove_all(dir);
  const auto flags = with(model, {"--batch", "16", "--train-limit", std::to_string(16 * steps)});
  {
    fmnist_cluster job(flags, 1, 2, with(checkpoints_in(dir), job_floor(2, 300)));
    const auto report = kill_join_and_finish(job);
    BOOST_TEST_INFO("report: " << report);
    const double done = json_number(report, "steps").value_or(0);
    BOOST_TEST(done == double(paced_count(16 * steps) / 16));
    BOOST_TEST(json_number(report, "updates_lost").value_or(-1) == 0);
    // Every step's push to each bucket (the model is cut into buckets under the message cap)
    // applied once.
    const double applied = json_number(report, "updates_applied").value_or(0);
    BOOST_TEST(applied >= 5 * done);
    BOOST_TEST(std::fmod(applied, done) == 0.0);
    BOOST_TEST(json_number(report, "test_accuracy").value_or(0) > 0.3);
    BOOST_TEST(json_number(report, "checkpoints").value_or(0) >= 1);
    check_joiner_stepped(report);
  }
  const auto report = resume_from(dir, flags, 1);
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "updates_lost").value_or(-1) == 0);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_dp_job_of_80_mb_survives_a_kill_a_joiner_and_its_coordinators_loss) {
  const auto dir = scratch("ladder-dp");
  fs::remove_all(dir);
  const uint64_t examples = paced_count(32 * steps);
  const auto flags =
      with(model, {"--mode", "dp", "--batch", "16", "--train-limit", std::to_string(32 * steps)});
  {
    fmnist_cluster job(flags, 0, 2,
                       with(with(checkpoints_in(dir), job_floor(3, 300)), {"--max-workers", "3"}),
                       true);
    BOOST_TEST_REQUIRE(job.standby->wait_for_output("following the coordinator"));
    BOOST_TEST_REQUIRE(job.coordinator->wait_for_output("checkpoint after step "));
    job.workers[1]->kill();
    job.start_worker();  // takes the whole state (values and moments: 240 MB) in pieces
    BOOST_TEST_REQUIRE(job.workers[2]->wait_for_output("member "));
    job.coordinator->kill();
    BOOST_TEST_INFO("standby: " << job.standby->output());
    BOOST_TEST_REQUIRE(job.standby->wait(std::chrono::seconds(300)).value_or(-1) == 0);
    BOOST_TEST(job.standby->output().find("took over as the coordinator") != std::string::npos);
    check_exits(job.workers, 1);
    const auto report = read_file(job.report.string());
    BOOST_TEST_INFO("report: " << report);
    BOOST_TEST(json_number(report, "steps").value_or(0) == std::ceil(double(examples) / 32));
    BOOST_TEST(json_number(report, "checksum_mismatches").value_or(1) == 0);
    BOOST_TEST(json_number(report, "generations").value_or(0) >= 2);
    const auto epochs = report_array(report, "epochs");
    BOOST_TEST_REQUIRE(epochs.size() == 1u);
    BOOST_TEST(epochs[0].value("examples", 0.0) == double(examples));  // each example once
    check_joiner_stepped(report);
    BOOST_TEST(json_number(report, "test_accuracy").value_or(0) > 0.3);
  }
  const auto report = resume_from(dir, flags, 0);
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "steps").value_or(0) == std::ceil(double(examples) / 32));
  BOOST_TEST(json_number(report, "checksum_mismatches").value_or(1) == 0);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_hybrid_job_of_67_mb_checkpoints_its_tables_takes_a_joiner_and_resumes) {
  const auto dir = scratch("ladder-hybrid");
  fs::remove_all(dir);
  const uint64_t examples = paced_count(32 * steps);
  const auto flags = with(ctr_model, {"--train-examples", std::to_string(32 * steps)});
  {
    fmnist_cluster job(flags, 1, 2,
                       with(with(checkpoints_in(dir), job_floor(3, 300)), {"--max-workers", "3"}),
                       false, ctr_bin, "--train-examples");
    const auto report = kill_join_and_finish(job);
    BOOST_TEST_INFO("report: " << report);
    BOOST_TEST(json_number(report, "steps").value_or(0) == std::ceil(double(examples) / 32));
    BOOST_TEST(json_number(report, "checksum_mismatches").value_or(1) == 0);
    BOOST_TEST(json_number(report, "generations").value_or(0) >= 2);
    BOOST_TEST(json_number(report, "updates_applied").value_or(0) > 0);  // the rows
    const auto epochs = report_array(report, "epochs");
    BOOST_TEST_REQUIRE(epochs.size() == 1u);
    BOOST_TEST(epochs[0].value("examples", 0.0) == double(examples));  // each example once
    BOOST_TEST(json_number(report, "checkpoints").value_or(0) >= 1);
    check_joiner_stepped(report);
  }
  const auto report = resume_from(dir, flags, 1, ctr_bin, "--train-examples");
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "steps").value_or(0) == std::ceil(double(examples) / 32));
  BOOST_TEST(json_number(report, "checksum_mismatches").value_or(1) == 0);
  // The tables came back with the rows' updates of the steps before the checkpoint.
  BOOST_TEST(json_number(report, "updates_applied").value_or(0) > 0);
  fs::remove_all(dir);
}
