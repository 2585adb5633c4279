// Data-parallel jobs (--mode dp) on the Fashion-MNIST MLP, in one process and as separate
// processes: two members with batch 64 compute what one member with batch 128 does (and four
// with 32), several buckets reduced while backward runs agree with one, a member's NaN
// gradient makes every member skip the step, and a job of a coordinator and two worker
// processes finishes with every process exiting 0.
#define BOOST_TEST_MODULE dp_job
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <cmath>
#include <csignal>
#include <limits>
#include <thread>

#include "actors/dp/collective/nccl_collective.hpp"
#include "actors/dp/plan/dp_plan.hpp"
#include "actors/dp/trainer/dp_trainer.hpp"
#include "apps/fmnist/mlp_task.hpp"
#include "child_process.hpp"
#include "dp_run.hpp"
#include "fmnist_cluster.hpp"
#include "poisoned_task.hpp"
#include "tests/support/sigpipe.hpp"
#include "troupe/node.hpp"

using namespace troupe;
using namespace troupe::testing;
namespace fs = std::filesystem;

using troupe::testing::ignore_sigpipe;
BOOST_TEST_GLOBAL_FIXTURE(ignore_sigpipe);

BOOST_AUTO_TEST_CASE(members_share_the_global_batch_and_compute_the_same_steps) {
  auto task = fmnist_task_of();
  const auto one = run_dp(task, 1, 128);
  const auto two = run_dp(task, 2, 64);
  const auto four = run_dp(task, 4, 32);
  for (const auto* run : {&one, &two, &four}) {
    BOOST_TEST_REQUIRE(run->finished);
    BOOST_TEST_REQUIRE(run->params.size() == one.params.size());
    BOOST_TEST(json_number(run->report, "steps").value_or(0) == 20);
    BOOST_TEST(json_number(run->report, "checksum_mismatches").value_or(1) == 0);
    BOOST_TEST(run->report.find("\"mode\": \"dp\"") != std::string::npos);
  }
  BOOST_TEST(relative_difference(two.params, one.params) <= 1e-5);
  BOOST_TEST(relative_difference(four.params, one.params) <= 1e-5);
  BOOST_TEST(json_number(one.report, "allreduce_bytes").value_or(1) == 0);  // alone: nothing sent
  BOOST_TEST(json_number(two.report, "allreduce_bytes").value_or(0) > 0);
}

BOOST_AUTO_TEST_CASE(small_buckets_reduced_during_backward_agree_with_one_bucket) {
  auto task = fmnist_task_of();
  const auto whole = run_dp(task, 2, 64, {"--no-overlap"});
  const auto buckets = run_dp(task, 2, 64, {"--bucket-mb", "0.25"});
  BOOST_TEST_REQUIRE(whole.finished);
  BOOST_TEST_REQUIRE(buckets.finished);
  BOOST_TEST(relative_difference(buckets.params, whole.params) <= 1e-6);
  // How much of the allreduce backward hides is timing, which apps/bench/dp_overlap_netns.sh
  // measures; on a loaded machine it can be none (this check once read 0 under ctest).
  const double overlap = json_number(buckets.report, "overlap").value_or(-1);
  BOOST_TEST((overlap >= 0 && overlap <= 1), overlap);
  BOOST_TEST(json_number(whole.report, "overlap").value_or(1) < 0.5);
}

BOOST_AUTO_TEST_CASE(two_level_reduction_agrees_with_flat_and_crosses_hosts_less) {
  auto task = fmnist_task_of();
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  const auto flat = run_dp(task, 4, 32, {"--reduction", "flat"}, hosts);
  const auto two = run_dp(task, 4, 32, {"--reduction", "two-level"}, hosts);
  BOOST_TEST_REQUIRE(flat.finished);
  BOOST_TEST_REQUIRE(two.finished);
  BOOST_TEST(relative_difference(two.params, flat.params) <= 1e-6);
  const double flat_inter = json_number(flat.report, "allreduce_bytes_inter_host").value_or(0);
  const double two_inter = json_number(two.report, "allreduce_bytes_inter_host").value_or(0);
  BOOST_TEST(flat_inter > 0);
  BOOST_TEST(two_inter > 0);
  BOOST_TEST(two_inter < flat_inter);
  BOOST_TEST(json_number(two.report, "checksum_mismatches").value_or(1) == 0);
}

BOOST_AUTO_TEST_CASE(a_finite_gradient_too_large_to_apply_is_skipped_by_every_member) {
  // Finite on the member (so the step is reduced), refused by the optimizer's bound after.
  auto task = std::make_shared<poisoned_task>(fmnist_task_of(), 5 * 128 + 100, 1e20f);
  const auto run = run_dp(task, 2, 64, {"--checksum-every", "1"});
  BOOST_TEST_REQUIRE(run.finished);
  BOOST_TEST(json_number(run.report, "skipped_steps").value_or(0) == 1);
  BOOST_TEST(json_number(run.report, "checksum_mismatches").value_or(1) == 0);
  for (float v : run.params) BOOST_TEST_REQUIRE(std::isfinite(v));
}

BOOST_AUTO_TEST_CASE(a_nan_gradient_on_one_member_is_skipped_by_every_member) {
  // Example 5 * 128 + 100 is member 1's at step 6 (of two members with 64 each).
  auto task = std::make_shared<poisoned_task>(fmnist_task_of(), 5 * 128 + 100);
  const auto run = run_dp(task, 2, 64, {"--checksum-every", "1"});
  BOOST_TEST_REQUIRE(run.finished);
  BOOST_TEST(json_number(run.report, "skipped_steps").value_or(0) == 1);
  BOOST_TEST(json_number(run.report, "checksum_mismatches").value_or(1) == 0);
  BOOST_TEST(json_number(run.report, "steps").value_or(0) == 20);
  for (float v : run.params) BOOST_TEST_REQUIRE(std::isfinite(v));
}

BOOST_AUTO_TEST_CASE(a_nan_gradient_in_a_one_bit_stage_leaves_the_error_feedback_clean) {
  // Step 6 is compressed (freeze after step 3): its NaN is skipped by all, and later steps
  // still apply (a NaN kept in an error buffer would make every later sum NaN).
  auto task = std::make_shared<poisoned_task>(fmnist_task_of(), 5 * 128 + 100);
  const auto run = run_dp(
      task, 2, 64, {"--checksum-every", "1", "--optimizer", "onebit-adam", "--freeze-step", "3"});
  BOOST_TEST_REQUIRE(run.finished);
  BOOST_TEST(json_number(run.report, "skipped_steps").value_or(0) == 1);
  BOOST_TEST(json_number(run.report, "checksum_mismatches").value_or(1) == 0);
  BOOST_TEST(json_number(run.report, "test_accuracy").value_or(0) > 0.6);
  for (float v : run.params) BOOST_TEST_REQUIRE(std::isfinite(v));
}

BOOST_AUTO_TEST_CASE(a_coordinator_and_two_worker_processes_finish_and_exit_zero) {
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const auto report = scratch("dp-processes.json");
  const std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  const std::vector<std::string> common = {
      "--mode",       "dp",   "--epochs", "1", "--train-limit", std::to_string(train_examples),
      "--test-limit", "1000", "--batch",  "64"};
  child_process coordinator(fmnist_command({"--role", "coordinator", "--listen", address,
                                            "--workers", "2", "--report", report.string()},
                                           common),
                            scratch("dp-c.log").string(), env);
  child_process w0(
      fmnist_command({"--role", "worker", "--coordinator", address, "--name", "w0"}, common),
      scratch("dp-w0.log").string(), env);
  child_process w1(
      fmnist_command({"--role", "worker", "--coordinator", address, "--name", "w1"}, common),
      scratch("dp-w1.log").string(), env);
  const auto deadline = std::chrono::seconds(240);
  BOOST_TEST(coordinator.wait(deadline).value_or(-1) == 0);
  BOOST_TEST(w0.wait(deadline).value_or(-1) == 0);
  BOOST_TEST(w1.wait(deadline).value_or(-1) == 0);
  const auto text = read_file(report.string());
  BOOST_TEST(json_number(text, "steps").value_or(0) == 20);
  BOOST_TEST(json_number(text, "test_accuracy").value_or(0) > 0.5);
  const auto parsed = parse_json(text);  // each member's peak memory, and the coordinator's
  BOOST_TEST(parsed.value("coordinator_peak_rss_mb", 0.0) > 1.0);
  BOOST_TEST_REQUIRE(parsed["workers"].size() == 2u);
  for (const auto& w : parsed["workers"]) BOOST_TEST(w.value("peak_rss_mb", 0.0) > 1.0, w.dump());
}

namespace {

// A job of a coordinator and `workers` worker processes on loopback.
struct dp_cluster {
  std::string address = "127.0.0.1:" + std::to_string(free_port());
  std::string tag = address.substr(10);
  std::filesystem::path report = scratch("dp-cluster-" + tag + ".json");
  std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests",
                                  "TROUPE_OPERATOR_SECRET=an-operator-secret-for-tests"};
  std::vector<std::string> flags;
  std::unique_ptr<child_process> coordinator;
  std::vector<std::unique_ptr<child_process>> workers;

  // The job's floor is one millisecond per step per worker unless `coordinator_flags` set
  // --worker-delay-ms themselves; its data is a third at the fast pace (pace.hpp).
  dp_cluster(uint32_t count, std::vector<std::string> common,
             std::vector<std::string> coordinator_flags = {})
      : flags(paced_data(std::move(common))) {
    flags.insert(flags.end(), {"--mode", "dp"});
    coordinator_flags = with_floor(std::move(coordinator_flags), count);
    coordinator_flags.insert(coordinator_flags.end(),
                             {"--role", "coordinator", "--listen", address, "--workers",
                              std::to_string(count), "--report", report.string()});
    coordinator =
        std::make_unique<child_process>(fmnist_command(coordinator_flags, flags), log_of("c"), env);
    for (uint32_t i = 0; i < count; ++i) add_worker();
  }

  std::string log_of(const std::string& who) const {
    return scratch("dp-" + who + "-" + tag + ".log").string();
  }

  void add_worker() {
    const std::string name = "w" + std::to_string(workers.size());
    workers.push_back(std::make_unique<child_process>(
        fmnist_command({"--role", "worker", "--coordinator", address, "--name", name}, flags),
        log_of(name), env));
  }

  // Waits (bounded) until the coordinator's log holds `text` `count` times.
  bool await_log(const std::string& text, std::chrono::milliseconds bound = progress_bound,
                 size_t count = 1) {
    return testing::await_log(log_of("c"), text, bound, count);
  }
};

// The optimizer steps of a job of `epochs` over `examples`, `global_batch` examples a step.
double steps_of(uint64_t examples, uint32_t global_batch, uint32_t epochs = 3) {
  return epochs * std::ceil(double(examples) / global_batch);
}

}  // namespace

namespace {

// A job of 4 worker processes (with `flags`) whose worker 2 is killed after the first epoch:
// the others finish, every example of every epoch used exactly once, the replicas equal.
void kill_one_of_four(const std::vector<std::string>& flags) {
  std::vector<std::string> common = {"--batch", "32", "--test-limit", "2000"};
  common.insert(common.end(), flags.begin(), flags.end());
  dp_cluster job(4, common);
  BOOST_TEST_REQUIRE(job.await_log("epoch 1/3"));
  job.workers[2]->kill();
  const auto bound = std::chrono::seconds(300);
  BOOST_TEST(job.coordinator->wait(bound).value_or(-1) == 0);
  for (size_t i : {0u, 1u, 3u}) BOOST_TEST(job.workers[i]->wait(bound).value_or(-1) == 0);
  const auto text = read_file(job.report.string());
  BOOST_TEST(json_number(text, "generations").value_or(0) >= 2);
  BOOST_TEST(text.find("\"name\": \"w2\"") != std::string::npos);
  BOOST_TEST(json_number(text, "reform_s").value_or(99) <= 10);  // 3 on an idle machine
  BOOST_TEST(json_number(text, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
  BOOST_TEST(json_number(text, "checksum_mismatches").value_or(1) == 0);
  size_t epochs = 0;
  for (size_t at = text.find("\"examples\": "); at != std::string::npos;
       at = text.find("\"examples\": ", at + 1), ++epochs)
    BOOST_TEST(std::stoul(text.substr(at + 12)) == paced_count(60000));
  BOOST_TEST(epochs == 3u);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_killed_worker_process_leaves_the_others_training) {
  kill_one_of_four({});
}

BOOST_AUTO_TEST_CASE(a_killed_worker_of_a_one_bit_adam_job_leaves_the_others_compressing) {
  // The generation formed after the loss has other chunks, so both error feedbacks restart.
  dp_cluster job(3, {"--batch", "64", "--train-limit", "19200", "--test-limit", "1000",
                     "--optimizer", "onebit-adam", "--freeze-step", "30"});
  BOOST_TEST_REQUIRE(job.await_log("epoch 1/3"));
  job.workers[1]->kill();
  const auto bound = std::chrono::seconds(300);
  BOOST_TEST(job.coordinator->wait(bound).value_or(-1) == 0);
  for (size_t i : {0u, 2u}) BOOST_TEST(job.workers[i]->wait(bound).value_or(-1) == 0);
  const auto text = read_file(job.report.string());
  BOOST_TEST(json_number(text, "generations").value_or(0) >= 2);
  BOOST_TEST(json_number(text, "checksum_mismatches").value_or(1) == 0);
  BOOST_TEST(json_number(text, "steps_by_stage.warmup").value_or(0) == 30);
  BOOST_TEST(json_number(text, "steps_by_stage.compressed").value_or(0) ==
             steps_of(paced_count(19200), 3 * 64) - 30);
  BOOST_TEST(json_number(text, "test_accuracy").value_or(0) > 0.7);
  BOOST_TEST(read_file(job.log_of("w0")).find("error feedback reset") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_model_over_the_message_cap_trains_and_a_joiner_takes_its_state_over) {
  // 784-4096-4096-10: 20 M parameters (80 MB, five times the codec's 16 MiB cap). The joiner
  // takes the state over at the new generation (values and Adam's moments: 240 MB), and every
  // epoch's parameters reach the coordinator in parts.
  auto coordinator_flags = job_floor(3, 5);
  coordinator_flags.insert(coordinator_flags.end(), {"--max-workers", "3"});
  dp_cluster job(2,
                 {"--batch", "32", "--train-limit", "7680", "--test-limit", "500", "--epochs", "2",
                  "--hidden", "4096,4096"},
                 coordinator_flags);
  BOOST_TEST_REQUIRE(job.await_log("generation 1 ("));
  job.add_worker();
  const auto bound = std::chrono::seconds(600);
  BOOST_TEST(job.coordinator->wait(bound).value_or(-1) == 0);
  for (auto& w : job.workers) BOOST_TEST(w->wait(bound).value_or(-1) == 0);
  const auto text = read_file(job.report.string());
  BOOST_TEST(json_number(text, "generations").value_or(0) >= 2);
  BOOST_TEST(json_number(text, "checksum_mismatches").value_or(1) == 0);
  BOOST_TEST(json_number(text, "test_accuracy").value_or(0) > 0.5);
  BOOST_TEST(read_file(job.log_of("w2")).find("member 2 of 3") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_worker_started_mid_job_joins_and_the_job_completes) {
  // A floor of 30 ms a step: the two epochs after the first (200 steps) outlast the new
  // process's start and join. Under --zero-stage 2 the joiner gets its pieces of the sharded
  // state (and the others' are cut anew for three).
  for (const char* stage : {"0", "2"}) {
    BOOST_TEST_CONTEXT("--zero-stage " << stage) {
      auto coordinator_flags = job_floor(3, 30);
      coordinator_flags.insert(coordinator_flags.end(), {"--max-workers", "3"});
      dp_cluster job(2,
                     {"--batch", "64", "--train-limit", "12800", "--test-limit", "1000",
                      "--zero-stage", stage, "--checksum-every", "10"},
                     coordinator_flags);
      BOOST_TEST_REQUIRE(job.await_log("epoch 1/3"));
      job.add_worker();
      const auto bound = std::chrono::seconds(300);
      BOOST_TEST(job.coordinator->wait(bound).value_or(-1) == 0);
      for (auto& w : job.workers) BOOST_TEST(w->wait(bound).value_or(-1) == 0);
      const auto text = read_file(job.report.string());
      BOOST_TEST(json_number(text, "generations").value_or(0) >= 2);
      BOOST_TEST(json_number(text, "steps").value_or(0) == steps_of(paced_count(12800), 128));
      BOOST_TEST(json_number(text, "checksum_mismatches").value_or(1) == 0);
      BOOST_TEST(read_file(job.log_of("w2")).find("member 2 of 3") != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_stopped_worker_is_left_behind_and_refused_when_it_resumes) {
  // The member resumes once the group has re-formed without it; the floor (5 ms a step, two
  // epochs of 267 steps to go) keeps the job running past that.
  dp_cluster job(
      3,
      {"--batch", "64", "--train-limit", "51200", "--test-limit", "1000", "--request-timeout", "4"},
      job_floor(3, 5));
  BOOST_TEST_REQUIRE(job.await_log("epoch 1/3"));
  job.workers[1]->signal(SIGSTOP);
  BOOST_TEST_REQUIRE(job.await_log("lost worker 'w1'", std::chrono::seconds(60)));
  BOOST_TEST_REQUIRE(job.await_log("generation 2 (", std::chrono::seconds(60)));
  job.workers[1]->signal(SIGCONT);
  const auto bound = std::chrono::seconds(300);
  BOOST_TEST(job.coordinator->wait(bound).value_or(-1) == 0);
  BOOST_TEST(job.workers[0]->wait(bound).value_or(-1) == 0);
  BOOST_TEST(job.workers[2]->wait(bound).value_or(-1) == 0);
  BOOST_TEST(job.workers[1]->wait(bound).value_or(0) != 0);
  BOOST_TEST(read_file(job.log_of("w1")).find("declared lost") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_checkpointed_job_killed_and_resumed_continues_from_the_checkpoint) {
  const auto dir = scratch("dp-checkpoints");
  fs::remove_all(dir);
  const std::vector<std::string> common = {"--batch", "64",           "--train-limit",
                                           "12800",   "--test-limit", "1000"};
  {
    dp_cluster first(2, common, {"--checkpoint-dir", dir.string(), "--checkpoint-every", "40"});
    BOOST_TEST_REQUIRE(first.await_log("checkpoint after step ", progress_bound, 2));  // 80
    first.coordinator->kill();
    for (auto& w : first.workers) w->kill();
  }
  dp_cluster second(2, common, {"--checkpoint-dir", dir.string(), "--resume", dir.string()});
  const auto bound = std::chrono::seconds(300);
  BOOST_TEST(second.coordinator->wait(bound).value_or(-1) == 0);
  for (auto& w : second.workers) BOOST_TEST(w->wait(bound).value_or(-1) == 0);
  const auto text = read_file(second.report.string());
  BOOST_TEST(json_number(text, "resumed_from_step").value_or(0) >= 80);
  BOOST_TEST(json_number(text, "steps").value_or(0) == steps_of(paced_count(12800), 128));
  BOOST_TEST(json_number(text, "test_accuracy").value_or(0) > 0.8);
  BOOST_TEST(read_file(second.log_of("c")).find("resuming after step") != std::string::npos);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(the_console_and_the_metrics_show_a_live_group_and_act_on_it) {
  const uint16_t metrics_port = free_port();
  const auto checkpoints = scratch("dp-console-checkpoints");
  fs::remove_all(checkpoints);
  auto coordinator_flags = job_floor(2, 8);  // 12 epochs of 100 steps: 9.6 s, past the reads
  coordinator_flags.insert(coordinator_flags.end(),
                           {"--metrics-port", std::to_string(metrics_port), "--checkpoint-dir",
                            checkpoints.string(), "--checkpoint-every", "100000"});
  dp_cluster job(
      2, {"--batch", "64", "--train-limit", "12800", "--test-limit", "1000", "--epochs", "12"},
      coordinator_flags);
  BOOST_TEST_REQUIRE(job.await_log("epoch 1/12"));
  auto console = [&](const std::string& command) {
    child_process c({TROUPE_CONSOLE_BIN, "--connect", job.address, "-c", command},
                    job.log_of("console-" + command), job.env);
    const int code = c.wait(std::chrono::seconds(60)).value_or(-1);
    return std::pair{code, c.output()};
  };
  const auto [group_code, group_text] = console("group");
  BOOST_TEST(group_code == 0);
  BOOST_TEST(group_text.find("generation") != std::string::npos);
  BOOST_TEST(group_text.find("w0") != std::string::npos);
  BOOST_TEST(group_text.find("w1") != std::string::npos);
  BOOST_TEST(group_text.find("live") != std::string::npos);
  const auto [tree_code, tree_text] = console("tree");
  BOOST_TEST(tree_code == 0);
  BOOST_TEST(tree_text.find("allreduce_group") != std::string::npos);
  // The shell's views and actions, as in every mode: the nodes with their heartbeats, the log
  // level of every node, a checkpoint now (none is due: --checkpoint-every is past the job).
  const auto [nodes_code, nodes_text] = console("nodes");
  BOOST_TEST(nodes_code == 0);
  BOOST_TEST(nodes_text.find("heartbeat_age_ms") != std::string::npos, nodes_text);
  BOOST_TEST(nodes_text.find("w1") != std::string::npos, nodes_text);
  const auto [log_code, log_text] = console("log debug");
  BOOST_TEST(log_code == 0);
  BOOST_TEST(log_text.find("log level debug on 3 nodes") != std::string::npos, log_text);
  const auto [checkpoint_code, checkpoint_text] = console("checkpoint");
  BOOST_TEST(checkpoint_code == 0, checkpoint_text);
  const std::string path = checkpoint_text.substr(0, checkpoint_text.find('\n'));
  BOOST_TEST(fs::exists(path), path);
  const auto [drain_code, drain_text] = console("drain w0");
  BOOST_TEST(drain_code == 1);
  BOOST_TEST(drain_text.find("no operator action 'drain'") != std::string::npos, drain_text);
  const std::string metrics = http_get(metrics_port, "/metrics");
  BOOST_TEST(metrics.find("troupe_group_generation 1") != std::string::npos);
  BOOST_TEST(metrics.find("troupe_group_members 2") != std::string::npos);
  BOOST_TEST(metrics.find("troupe_allreduce_bytes_total") != std::string::npos);
  BOOST_TEST(metrics.find("troupe_allreduce_seconds_count") != std::string::npos);
  const auto bound = std::chrono::seconds(300);
  BOOST_TEST(job.coordinator->wait(bound).value_or(-1) == 0);
  for (auto& w : job.workers) BOOST_TEST(w->wait(bound).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(a_console_checkpoint_of_sharded_state_resumes_at_another_size) {
  // 2 members at --batch 96 under stage 2 save when the console asks (member 0's flag in the
  // step's meta: both save the same step); 3 at --batch 64 under stage 1 resume from it.
  const auto checkpoints = scratch("dp-zero-console-checkpoints");
  fs::remove_all(checkpoints);
  const std::vector<std::string> data = {"--train-limit", "12800",    "--test-limit",
                                         "1000",          "--epochs", "12"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), data.begin(), data.end());
    return more;
  };
  auto coordinator_flags = job_floor(2, 8);  // 12 epochs at 8 ms a step: past the save
  coordinator_flags.insert(coordinator_flags.end(), {"--checkpoint-dir", checkpoints.string(),
                                                     "--checkpoint-every", "100000"});
  {
    dp_cluster first(2, with({"--batch", "96", "--zero-stage", "2"}), coordinator_flags);
    BOOST_TEST_REQUIRE(first.await_log("epoch 1/12"));
    child_process console({TROUPE_CONSOLE_BIN, "--connect", first.address, "-c", "checkpoint"},
                          first.log_of("console"), first.env);
    BOOST_TEST_REQUIRE(console.wait(std::chrono::seconds(60)).value_or(-1) == 0, console.output());
    const std::string path = console.output().substr(0, console.output().find('\n'));
    BOOST_TEST_REQUIRE(fs::exists(path), path);
    first.coordinator->kill();
    for (auto& w : first.workers) w->kill();
  }
  dp_cluster second(3, with({"--batch", "64", "--zero-stage", "1"}),
                    {"--resume", checkpoints.string()});
  const auto bound = std::chrono::seconds(300);
  BOOST_TEST(second.coordinator->wait(bound).value_or(-1) == 0);
  for (auto& w : second.workers) BOOST_TEST(w->wait(bound).value_or(-1) == 0);
  const auto text = read_file(second.report.string());
  BOOST_TEST(json_number(text, "resumed_from_step").value_or(0) > 0, text);
  BOOST_TEST(json_number(text, "steps").value_or(0) == steps_of(paced_count(12800), 192, 12));
  BOOST_TEST(json_number(text, "checksum_mismatches").value_or(1) == 0);
  BOOST_TEST(json_number(text, "test_accuracy").value_or(0) > 0.8);
  fs::remove_all(checkpoints);
}

BOOST_AUTO_TEST_CASE(the_actors_backend_trains_and_survives_a_killed_worker) {
  dp_cluster job(3, {"--batch", "64", "--train-limit", "25600", "--test-limit", "1000",
                     "--collective", "actors"});
  BOOST_TEST_REQUIRE(job.await_log("epoch 1/3"));
  job.workers[1]->kill();
  const auto bound = std::chrono::seconds(300);
  BOOST_TEST(job.coordinator->wait(bound).value_or(-1) == 0);
  BOOST_TEST(job.workers[0]->wait(bound).value_or(-1) == 0);
  BOOST_TEST(job.workers[2]->wait(bound).value_or(-1) == 0);
  const auto text = read_file(job.report.string());
  BOOST_TEST(json_number(text, "generations").value_or(0) >= 2);
  BOOST_TEST(json_number(text, "reform_s").value_or(99) <= 10);
  BOOST_TEST(json_number(text, "checksum_mismatches").value_or(1) == 0);
  BOOST_TEST(json_number(text, "test_accuracy").value_or(0) > 0.8);
  for (size_t at = text.find("\"examples\": "); at != std::string::npos;
       at = text.find("\"examples\": ", at + 1))
    BOOST_TEST(std::stoul(text.substr(at + 12)) == paced_count(25600));
}

BOOST_AUTO_TEST_CASE(nccl_without_a_gpu_for_every_worker_is_refused_at_the_start) {
  // CI has no GPU: the process says why and exits non-zero before it trains anything.
  if (nccl_devices()) return;  // a GPU machine: tests/gpu/nccl_collective_test covers it
  const auto log = scratch("dp-nccl.log");
  child_process job(
      fmnist_command({"--mode", "dp", "--workers", "2", "--collective", "nccl", "--epochs", "1"},
                     {}),
      log.string());
  BOOST_TEST(job.wait(std::chrono::seconds(60)).value_or(0) == 1);
  BOOST_TEST(read_file(log.string()).find("--collective nccl") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_pairing_sharded_state_does_not_take_is_refused_with_exit_code_2) {
  const auto log = scratch("dp-zero-onebit.log");
  child_process job(fmnist_command({"--mode", "dp", "--workers", "2", "--zero-stage", "1",
                                    "--optimizer", "onebit-adam", "--epochs", "1"},
                                   {}),
                    log.string());
  BOOST_TEST(job.wait(std::chrono::seconds(60)).value_or(0) == 2);
  BOOST_TEST(read_file(log.string()).find("--zero-stage 1: --optimizer onebit-adam") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_killed_member_of_a_sharded_group_leaves_the_others_training) {
  // --zero-stage 2 with a shard backup: the killed member's pieces live on with the member
  // after it, and the new generation cuts them anew from the copies left.
  kill_one_of_four({"--zero-stage", "2", "--shard-backups", "1", "--checksum-every", "5"});
}

BOOST_AUTO_TEST_CASE(with_no_shard_backups_a_loss_ends_the_job_and_says_why) {
  dp_cluster job(
      3, {"--batch", "32", "--test-limit", "1000", "--zero-stage", "1", "--shard-backups", "0"});
  BOOST_TEST_REQUIRE(job.await_log("epoch 1/3"));
  job.workers[1]->kill();
  const auto bound = std::chrono::seconds(120);
  BOOST_TEST(job.coordinator->wait(bound).value_or(0) != 0);
  for (size_t i : {0u, 2u}) BOOST_TEST(job.workers[i]->wait(bound).has_value());
  const auto parsed = parse_json(read_file(job.report.string()));
  BOOST_TEST(parsed.value("status", "") == "failed");
  BOOST_TEST(parsed.value("failure", "").find("--shard-backups 0") != std::string::npos,
             parsed.value("failure", ""));
}

BOOST_AUTO_TEST_CASE(with_no_shard_backups_a_loss_goes_back_to_the_last_checkpoint) {
  // Every member restores the newest checkpoint's parameters and pieces, cut for the two left,
  // and the job's progress goes back to it; the job then trains to its end.
  const auto dir = scratch("dp-zero-go-back");
  fs::remove_all(dir);
  dp_cluster job(3,
                 {"--batch", "32", "--train-limit", "19200", "--test-limit", "1000", "--zero-stage",
                  "2", "--shard-backups", "0", "--checksum-every", "5"},
                 {"--checkpoint-dir", dir.string(), "--checkpoint-every", "20"});
  BOOST_TEST_REQUIRE(job.await_log("checkpoint after step ", progress_bound, 2));
  job.workers[1]->kill();
  const auto bound = std::chrono::seconds(300);
  BOOST_TEST(job.coordinator->wait(bound).value_or(-1) == 0);
  for (size_t i : {0u, 2u}) BOOST_TEST(job.workers[i]->wait(bound).value_or(-1) == 0);
  const auto text = read_file(job.report.string());
  BOOST_TEST(json_number(text, "steps").value_or(0) == steps_of(paced_count(19200), 96), text);
  BOOST_TEST(json_number(text, "checksum_mismatches").value_or(1) == 0);
  BOOST_TEST(json_number(text, "test_accuracy").value_or(0) > 0.8);
  BOOST_TEST(read_file(job.log_of("c")).find("go back to the checkpoint after step") !=
             std::string::npos);
  BOOST_TEST(read_file(job.log_of("w0")).find("going back to the checkpoint after step") !=
             std::string::npos);
  fs::remove_all(dir);
}
