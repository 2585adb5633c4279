// --mode diloco (DiLoCo on the parameter service) with the Fashion-MNIST MLP: one worker taking
// one SGD step a round, pushed to an outer SGD of rate 1, trains as --mode ps step for step; with
// four fragments each syncs after its own step of the round; a non-finite local step is skipped
// and nothing poisoned; int8 pseudo-gradients take a quarter of fp32's bytes and train as well;
// a model of 80 MB trains; and with real processes, a worker killed mid-round has its round
// done again by the other while nothing else is lost, a server killed under --replication 2
// loses nothing, a killed job resumes from its checkpoint (the outer momentum in it), and a
// standby coordinator takes over.
#define BOOST_TEST_MODULE diloco
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "dp_run.hpp"
#include "fmnist_cluster.hpp"
#include "forwarding_task.hpp"
#include "ps_run.hpp"
#include "tests/support/sigpipe.hpp"
#include "troupe/detail/layout.hpp"

using namespace troupe;
using namespace troupe::testing;

using troupe::testing::ignore_sigpipe;
BOOST_TEST_GLOBAL_FIXTURE(ignore_sigpipe);

namespace {

// fmnist, with each batch's gradient (and loss) rewritten by `rig` after the model's.
using rigging = std::function<float(uint64_t batch, float loss, std::span<float> grad)>;
class rigged_task : public forwarding_task {
 public:
  rigged_task(std::shared_ptr<const training_task> inner, rigging rig)
      : forwarding_task(std::move(inner)), rig_(std::move(rig)) {}
  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                            uint64_t seed) const override {
    auto inner = inner_->make_replica(batch, seed);
    if (!inner) return std::move(inner.error());
    return std::unique_ptr<task_replica>(new replica(std::move(*inner), rig_));
  }

 private:
  struct replica : task_replica {
    replica(std::unique_ptr<task_replica> r, rigging g) : inner(std::move(r)), rig(std::move(g)) {}
    caf::expected<float> gradient(std::span<const float> p, uint32_t e, uint64_t b,
                                  std::span<float> g) override {
      auto loss = inner->gradient(p, e, b, g);
      if (!loss) return loss;
      return rig(b, *loss, g);
    }
    std::unique_ptr<task_replica> inner;
    rigging rig;
  };
  rigging rig_;
};

std::vector<std::string> diloco(std::vector<std::string> flags) {
  flags.insert(flags.begin(), {"--mode", "diloco"});
  return flags;
}

double epoch_loss(const std::string& report, int epoch) {
  return json_number(report, "epochs." + std::to_string(epoch) + ".train_loss").value_or(-1);
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_sgd_step_a_round_under_outer_sgd_of_rate_one_is_ps_step_for_step) {
  // One batch an epoch, so that each epoch's train loss is one step's loss.
  auto task = fmnist_task_of(64);
  const std::vector<std::string> job = {"--workers", "1",  "--servers",   "2",   "--batch", "64",
                                        "--epochs",  "12", "--optimizer", "sgd", "--lr",    "0.1"};
  const auto ps = run_ps(task, job);
  auto local = job;
  local.insert(local.end(), {"--sync-every", "1", "--outer-optimizer", "sgd", "--outer-lr", "1"});
  const auto rounds = run_ps(task, diloco(local));
  for (const auto* run : {&ps, &rounds}) {
    BOOST_TEST_REQUIRE(run->finished, run->report);
    BOOST_TEST_REQUIRE(!run->params.empty());
    BOOST_TEST_REQUIRE(run->params.size() == ps.params.size());
  }
  BOOST_TEST(json_number(rounds.report, "rounds").value_or(0) == 12);
  for (int e = 0; e < 12; ++e)
    BOOST_TEST(std::abs(epoch_loss(rounds.report, e) - epoch_loss(ps.report, e)) <=
                   1e-5 * std::abs(epoch_loss(ps.report, e)),
               "epoch " << e);
  BOOST_TEST(epoch_loss(ps.report, 11) < epoch_loss(ps.report, 0));  // it trained
  BOOST_TEST(relative_difference(rounds.params, ps.params) <= 1e-5);
  // The outer rate is applied: half of it is another job.
  local.back() = "0.5";
  const auto half = run_ps(task, diloco(local));
  BOOST_TEST(relative_difference(half.params, ps.params) > 1e-3);
}

BOOST_AUTO_TEST_CASE(with_four_fragments_each_syncs_after_its_own_step_of_the_round) {
  // Every gradient is 1: each local SGD step moves every value by -0.01. Two rounds of four
  // steps, one worker, outer SGD of rate 1, four buckets. Fragment k (bucket k) pushes the k + 1
  // steps before its sync, keeps the 3 - k after it, and pushes those with the next round's
  // k + 1: after the job its values moved by 0.01 (k + 1) + 0.04.
  auto task = std::make_shared<rigged_task>(fmnist_task_of(8 * 64),
                                            [](uint64_t, float loss, std::span<float> g) {
                                              std::fill(g.begin(), g.end(), 1.0f);
                                              return loss;
                                            });
  const std::vector<std::string> job = {
      "--workers",         "1",   "--servers",   "2",   "--buckets",   "4",    "--batch",      "64",
      "--epochs",          "1",   "--optimizer", "sgd", "--lr",        "0.01", "--sync-every", "4",
      "--outer-optimizer", "sgd", "--outer-lr",  "1",   "--fragments", "4"};
  const auto run = run_ps(task, diloco(job));
  BOOST_TEST_REQUIRE(run.finished, run.report);
  const flat_layout layout{task->parameters()};
  std::vector<float> initial(layout.total);
  task->initialize(1, initial);
  const auto plan = plan_buckets(layout, 4, 2);
  BOOST_TEST_REQUIRE(plan.buckets.size() == 4u);
  BOOST_TEST_REQUIRE(run.params.size() == layout.total);
  for (uint32_t k = 0; k < 4; ++k)
    for (const auto& s : plan.buckets[k].slices) {
      const auto range = locate(layout, s);
      BOOST_TEST_REQUIRE(bool(range));
      for (uint64_t i = range->offset; i < range->offset + range->count; i += 97)
        BOOST_TEST_REQUIRE(std::abs(initial[i] - run.params[i] - (0.01 * (k + 1) + 0.04)) < 1e-5,
                           "fragment " << k << " value " << i);
    }
  BOOST_TEST(json_number(run.report, "rounds").value_or(0) == 2);
}

BOOST_AUTO_TEST_CASE(a_non_finite_local_step_is_skipped_and_poisons_nothing) {
  auto task = std::make_shared<rigged_task>(fmnist_task_of(),
                                            [](uint64_t batch, float loss, std::span<float> g) {
                                              if (batch == 7)
                                                g[12345] = std::numeric_limits<float>::quiet_NaN();
                                              return loss;
                                            });
  const auto run = run_ps(
      task, diloco({"--workers", "2", "--batch", "128", "--epochs", "2", "--sync-every", "5"}));
  BOOST_TEST_REQUIRE(run.finished, run.report);
  for (float v : run.params) BOOST_TEST_REQUIRE(std::isfinite(v));
  BOOST_TEST(json_number(run.report, "steps").value_or(0) == 40);
  BOOST_TEST(json_number(run.report, "test_accuracy").value_or(0) > 0.6);
}

BOOST_AUTO_TEST_CASE(int8_pseudo_gradients_take_a_quarter_of_the_bytes_and_train_as_well) {
  auto task = fmnist_task_of(60 * 128);
  const std::vector<std::string> job = {"--workers", "2", "--batch",      "128",
                                        "--epochs",  "2", "--sync-every", "10"};
  const auto fp32 = run_ps(task, diloco(job));
  auto int8_job = job;
  int8_job.insert(int8_job.end(), {"--comm-dtype", "int8"});
  const auto int8 = run_ps(task, diloco(int8_job));
  for (const auto* run : {&fp32, &int8}) BOOST_TEST_REQUIRE(run->finished, run->report);
  const double full = json_number(fp32.report, "pseudo_gradient_bytes").value_or(0);
  const double small = json_number(int8.report, "pseudo_gradient_bytes").value_or(0);
  BOOST_TEST(json_number(int8.report, "rounds").value_or(0) == 12);
  BOOST_TEST(full == 12 * 4.0 * fp32.params.size());
  BOOST_TEST(small <= 0.26 * full);
  BOOST_TEST(json_number(int8.report, "test_accuracy").value_or(0) >=
             json_number(fp32.report, "test_accuracy").value_or(1) - 0.03);
}

BOOST_AUTO_TEST_CASE(a_model_of_80_megabytes_trains_in_rounds) {
  // 784-4096-4096-10: 20 M parameters (80 MB), two rounds of two steps on each of 2 workers.
  auto made = fmnist::make_fmnist_task(data_dir, 8 * 32, 200, {4096, 4096});
  BOOST_TEST_REQUIRE(bool(made));
  std::shared_ptr<const training_task> task(std::move(*made));
  const auto run = run_ps(task, diloco({"--workers", "2", "--batch", "32", "--epochs", "1",
                                        "--sync-every", "2", "--comm-dtype", "bf16"}));
  BOOST_TEST_REQUIRE(run.finished, run.report);
  BOOST_TEST(run.params.size() > 20'000'000u);
  BOOST_TEST(json_number(run.report, "rounds").value_or(0) == 4);
  BOOST_TEST(json_number(run.report, "pseudo_gradient_bytes").value_or(0) ==
             4 * 2.0 * run.params.size());
  for (size_t i = 0; i < run.params.size(); i += 1009)
    BOOST_TEST_REQUIRE(std::isfinite(run.params[i]));
}

// -- processes ----------------------------------------------------------------------------------

namespace {

// Every round's pseudo-gradient applied once by each bucket (a round redone for a lost worker
// is acknowledged as a duplicate where its first push landed), and every batch done.
void check_every_round_applied_once(const std::string& report, double buckets = 4) {
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "updates_lost").value_or(-1) == 0);
  BOOST_TEST(json_number(report, "steps").value_or(0) == 3 * full_job_batches_per_epoch());
  const double rounds = json_number(report, "rounds").value_or(0);
  BOOST_TEST(rounds >= std::ceil(full_job_batches_per_epoch() / 20) * 3);
  BOOST_TEST(json_number(report, "updates_applied").value_or(0) +
                 json_number(report, "updates_rejected").value_or(0) +
                 json_number(report, "updates_skipped").value_or(0) ==
             buckets * rounds);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar() - 0.02);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_worker_killed_mid_round_has_its_round_done_again_and_loses_nothing_else) {
  fmnist_cluster cluster{full_ps_job({"--mode", "diloco", "--sync-every", "20"}), 2, 2,
                         job_floor(2, 2)};
  BOOST_TEST_REQUIRE(cluster.await_batches(full_job_batches_per_epoch()));
  cluster.workers[0]->kill();
  const auto code = cluster.coordinator->wait(full_job_time);
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  const std::string report = read_file(cluster.report.string());
  BOOST_TEST(report_array(report, "workers_lost").size() == 1u);
  check_every_round_applied_once(report);
}

BOOST_AUTO_TEST_CASE(a_server_killed_under_replication_two_loses_nothing) {
  fmnist_cluster cluster{
      full_ps_job({"--mode", "diloco", "--sync-every", "20", "--replication", "2"}), 3, 2,
      job_floor(2, 2)};
  BOOST_TEST_REQUIRE(cluster.await_batches(full_job_batches_per_epoch()));
  cluster.servers[0]->kill();
  const auto code = cluster.coordinator->wait(full_job_time);
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  const std::string report = read_file(cluster.report.string());
  BOOST_TEST(parse_json(report)["mode"] == "diloco");
  check_every_round_applied_once(report);
}

namespace {

std::vector<std::filesystem::path> checkpoint_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".troupe") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string finished_report(fmnist_cluster& cluster, child_process& coordinator) {
  const auto code = coordinator.wait(full_job_time);
  BOOST_TEST_INFO("coordinator: " << coordinator.output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  return read_file(cluster.report.string());
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_killed_job_resumes_its_rounds_and_outer_momentum_from_a_checkpoint) {
  const auto dir = scratch("diloco-checkpoints");
  std::filesystem::remove_all(dir);
  const auto flags = full_ps_job({"--mode", "diloco", "--sync-every", "20", "--checkpoint-every",
                                  "400", "--checkpoint-dir", dir.string(), "--resume", ""});
  {
    fmnist_cluster first{flags};
    BOOST_TEST_REQUIRE(first.coordinator->wait_for_output("checkpoint after step", full_job_time));
    for (auto* p : {first.coordinator.get(), first.servers[0].get(), first.servers[1].get(),
                    first.workers[0].get(), first.workers[1].get()})
      p->kill();
  }
  const auto files = checkpoint_files(dir);
  BOOST_TEST_REQUIRE(!files.empty());
  const double newest = std::stod(files.back().stem().string().substr(5));
  auto resume_flags = flags;
  resume_flags.back() = dir.string();  // --resume DIR
  fmnist_cluster resumed{resume_flags};
  const std::string report = finished_report(resumed, *resumed.coordinator);
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "resumed_from_step").value_or(0) == newest);
  BOOST_TEST(json_number(report, "steps").value_or(0) == 3 * full_job_batches_per_epoch());
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar() - 0.02);
}

BOOST_AUTO_TEST_CASE(a_standby_coordinator_takes_over_a_diloco_job_and_loses_nothing) {
  fmnist_cluster cluster{full_ps_job({"--mode", "diloco", "--sync-every", "20"}), 2, 2,
                         job_floor(2, 2), true};
  BOOST_TEST_REQUIRE(cluster.standby->wait_for_output("following the coordinator", full_job_time));
  BOOST_TEST_REQUIRE(cluster.await_batches(full_job_batches_per_epoch()));
  cluster.coordinator->kill();
  const std::string report = finished_report(cluster, *cluster.standby);
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(report_array(report, "takeovers").size() == 1u);
  BOOST_TEST(json_number(report, "updates_lost").value_or(-1) == 0);
  BOOST_TEST(json_number(report, "steps").value_or(0) == 3 * full_job_batches_per_epoch());
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar() - 0.02);
}
