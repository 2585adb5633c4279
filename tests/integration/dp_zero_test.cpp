// Sharded optimizer state (--zero-stage 1) and sharded gradients (--zero-stage 2) in
// data-parallel jobs of the Fashion-MNIST MLP, in one process: stages 1 and 2 compute what
// stage 0 does step for step (Adam and SGD, uneven pieces of many buckets, a model of 80 MB,
// with --balance, and stage 1 with --accumulate), a NaN or a sum too large to apply on one
// member's piece is skipped by every member, and bf16 halves the bytes.
#define BOOST_TEST_MODULE dp_zero
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <csignal>

#include "apps/fmnist/mlp_task.hpp"
#include "dp_run.hpp"
#include "forwarding_task.hpp"
#include "poisoned_task.hpp"
#include "tests/support/sigpipe.hpp"

using namespace troupe;
using namespace troupe::testing;

using troupe::testing::ignore_sigpipe;
BOOST_TEST_GLOBAL_FIXTURE(ignore_sigpipe);

namespace {

// Stage 0's run and each of `stages`' runs of the same job (with --shard-backups 0 and 1)
// agree within 1e-5 of the parameters' norm, and each finished every step with equal replicas.
void expect_same_steps(std::shared_ptr<const training_task> task, uint32_t workers, uint32_t batch,
                       const std::vector<std::string>& flags,
                       const std::vector<std::string>& stages = {"1", "2"}) {
  const auto whole = run_dp(task, workers, batch, flags);
  BOOST_TEST_REQUIRE(whole.finished);
  BOOST_TEST(json_number(whole.report, "zero_stage").value_or(1) == 0);
  const double bytes = json_number(whole.report, "allreduce_bytes").value_or(0);
  for (const auto& stage : stages)
    for (const char* backups : {"0", "1"}) {
      BOOST_TEST_CONTEXT("--zero-stage " << stage << " --shard-backups " << backups) {
        auto sharded_flags = flags;
        sharded_flags.insert(sharded_flags.end(),
                             {"--zero-stage", stage, "--shard-backups", backups});
        const auto sharded = run_dp(task, workers, batch, sharded_flags);
        for (const auto* run : {&whole, &sharded}) {
          BOOST_TEST_REQUIRE(run->finished);
          BOOST_TEST(json_number(run->report, "checksum_mismatches").value_or(1) == 0);
          BOOST_TEST(json_number(run->report, "skipped_steps").value_or(1) == 0);
        }
        BOOST_TEST(json_number(sharded.report, "steps").value_or(0) ==
                   json_number(whole.report, "steps").value_or(-1));
        BOOST_TEST(json_number(sharded.report, "zero_stage").value_or(0) == std::stod(stage));
        BOOST_TEST_REQUIRE(sharded.params.size() == whole.params.size());
        BOOST_TEST(relative_difference(sharded.params, whole.params) <= 1e-5);
        // An allreduce's bytes over a reduce-scatter and an all-gather (+ the meta's few); a
        // backup doubles what the reduce-scatter sends.
        const double sent = json_number(sharded.report, "allreduce_bytes").value_or(0);
        BOOST_TEST(sent <= (backups[0] == '0' ? 1.01 : 1.51) * bytes);
      }
    }
}

// fmnist, streamed (--zero-stage 2), but tensor 1's gradient put one value short.
class short_put_task : public forwarding_task {
 public:
  using forwarding_task::forwarding_task;
  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                            uint64_t seed) const override {
    auto inner = inner_->make_replica(batch, seed);
    if (!inner) return std::move(inner.error());
    return std::unique_ptr<task_replica>(new replica(std::move(*inner)));
  }

 private:
  struct replica : task_replica {
    explicit replica(std::unique_ptr<task_replica> r) : inner(std::move(r)) {}
    caf::expected<float> gradient(std::span<const float> p, uint32_t e, uint64_t b,
                                  std::span<float> g) override {
      return inner->gradient(p, e, b, g);
    }
    bool streams_gradients() const override { return true; }
    caf::expected<range_result> gradient_range_streamed(std::span<const float> p, uint32_t epoch,
                                                        uint64_t first, uint32_t count,
                                                        const gradient_put& put) override {
      return inner->gradient_range_streamed(
          p, epoch, first, count, [&](size_t t, std::span<const float> values) {
            put(t, t == 1 ? values.first(values.size() - 1) : values);
          });
    }
    std::unique_ptr<task_replica> inner;
  };
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_tensor_put_at_the_wrong_size_fails_the_job_saying_which) {
  auto task = std::make_shared<short_put_task>(fmnist_task_of());
  const auto run = run_dp(task, 2, 64, {"--zero-stage", "2"});
  BOOST_TEST(!run.finished);
  BOOST_TEST(
      run.report.find("the task put 255 values for tensor 'fc1.b' of 256") != std::string::npos,
      run.report);
}

BOOST_AUTO_TEST_CASE(stages_one_and_two_take_the_steps_of_stage_zero_with_adam_and_sgd) {
  // Three members: a bucket's pieces are uneven; buckets of 0.05 MiB: many of them.
  auto task = fmnist_task_of();
  expect_same_steps(task, 3, 43, {"--bucket-mb", "0.05", "--checksum-every", "1"});
  expect_same_steps(task, 2, 64, {"--optimizer", "sgd", "--lr", "0.05", "--checksum-every", "1"});
  expect_same_steps(task, 2, 64,
                    {"--optimizer", "adamw", "--weight-decay", "0.01", "--checksum-every", "5"});
}

BOOST_AUTO_TEST_CASE(stage_one_accumulates_and_both_balance_as_stage_zero) {
  auto task = fmnist_task_of();
  expect_same_steps(task, 2, 32, {"--accumulate", "2"}, {"1"});  // (stage 2 refuses it)
  expect_same_steps(task, 2, 64, {"--balance", "--worker-slowdown", "1:2"});
}

BOOST_AUTO_TEST_CASE(stages_one_and_two_train_a_model_of_80_megabytes_as_stage_zero) {
  // 784-4096-4096-10: 20 M parameters (80 MB), 4 steps of 2 members.
  auto made = fmnist::make_fmnist_task(data_dir, 4 * 64, 200, {4096, 4096});
  BOOST_TEST_REQUIRE(bool(made));
  std::shared_ptr<const training_task> task(std::move(*made));
  expect_same_steps(task, 2, 32, {"--checksum-every", "1"});
}

BOOST_AUTO_TEST_CASE(a_nan_on_one_member_is_skipped_by_every_member_of_a_sharded_group) {
  auto task = std::make_shared<poisoned_task>(fmnist_task_of(), 5 * 128 + 100);
  for (const char* stage : {"1", "2"}) {
    BOOST_TEST_CONTEXT("--zero-stage " << stage) {
      const auto run = run_dp(task, 2, 64, {"--checksum-every", "1", "--zero-stage", stage});
      BOOST_TEST_REQUIRE(run.finished);
      BOOST_TEST(json_number(run.report, "skipped_steps").value_or(0) == 1);
      BOOST_TEST(json_number(run.report, "steps").value_or(0) == 20);
      BOOST_TEST(json_number(run.report, "checksum_mismatches").value_or(1) == 0);
      for (float v : run.params) BOOST_TEST_REQUIRE(std::isfinite(v));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_sum_too_large_for_one_members_piece_is_skipped_by_every_member) {
  // Finite on the member, above the optimizer's bound once summed: only the member whose piece
  // holds it sees that, and it tells the others in the meta.
  auto task = std::make_shared<poisoned_task>(fmnist_task_of(), 5 * 128 + 100, 1e20f);
  for (const char* stage : {"1", "2"}) {
    BOOST_TEST_CONTEXT("--zero-stage " << stage) {
      const auto run = run_dp(task, 3, 43, {"--checksum-every", "1", "--zero-stage", stage});
      BOOST_TEST_REQUIRE(run.finished);
      BOOST_TEST(json_number(run.report, "skipped_steps").value_or(0) == 1);
      BOOST_TEST(json_number(run.report, "checksum_mismatches").value_or(1) == 0);
      for (float v : run.params) BOOST_TEST_REQUIRE(std::isfinite(v));
    }
  }
}

BOOST_AUTO_TEST_CASE(bf16_halves_what_the_reduce_scatter_sends) {
  auto task = fmnist_task_of();
  const auto fp32 = run_dp(task, 2, 64, {"--zero-stage", "1", "--shard-backups", "0"});
  const auto bf16 =
      run_dp(task, 2, 64, {"--zero-stage", "1", "--shard-backups", "0", "--comm-dtype", "bf16"});
  BOOST_TEST_REQUIRE(fp32.finished);
  BOOST_TEST_REQUIRE(bf16.finished);
  BOOST_TEST(json_number(bf16.report, "checksum_mismatches").value_or(1) == 0);
  // The gradient's half travels packed; the parameters' half stays exact.
  const double full = json_number(fp32.report, "allreduce_bytes").value_or(0);
  const double packed = json_number(bf16.report, "allreduce_bytes").value_or(0);
  BOOST_TEST(packed < 0.8 * full);
  BOOST_TEST(packed > 0.7 * full);
  BOOST_TEST(relative_difference(bf16.params, fp32.params) <= 1e-2);
}

namespace {

// The newest checkpoint in `dir` holds the state after `step`; a job resumed from it by
// `workers` members at `batch` each, with `flags`, ends where `whole` (the job that wrote it,
// run to its end) ended.
void expect_resumed_as_whole(std::shared_ptr<const training_task> task, const dp_run& whole,
                             const std::filesystem::path& dir, uint64_t step, uint32_t workers,
                             uint32_t batch, std::vector<std::string> flags) {
  flags.insert(flags.end(), {"--resume", dir.string()});
  const auto resumed = run_dp(task, workers, batch, flags);
  BOOST_TEST_REQUIRE(resumed.finished, resumed.report);
  BOOST_TEST(json_number(resumed.report, "resumed_from_step").value_or(0) == double(step));
  BOOST_TEST(json_number(resumed.report, "steps").value_or(0) ==
             json_number(whole.report, "steps").value_or(-1));
  BOOST_TEST(json_number(resumed.report, "checksum_mismatches").value_or(1) == 0);
  // The epoch's train loss counts the checkpoint's steps (every member's report of them) once.
  const double loss = json_number(whole.report, "epochs.0.train_loss").value_or(-1);
  BOOST_TEST(std::abs(json_number(resumed.report, "epochs.0.train_loss").value_or(0) - loss) <=
             1e-6 * loss);
  BOOST_TEST_REQUIRE(resumed.params.size() == whole.params.size());
  BOOST_TEST(relative_difference(resumed.params, whole.params) <= 1e-5);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_sharded_checkpoint_resumes_at_another_size_and_stage) {
  // 14 steps of (up to) 192 examples; a checkpoint every 5 steps: the newest is the one after 10.
  // Buckets of 0.05 MiB: every member's pieces of many buckets, uneven over 3.
  auto task = fmnist_task_of();
  const auto dir = scratch("dp-zero-checkpoints");
  const std::vector<std::string> common = {"--bucket-mb", "0.05", "--checksum-every", "1"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return more;
  };
  const std::vector<std::string> saving = {
      "--checkpoint-dir", dir.string(), "--checkpoint-every", "5", "--checkpoint-keep", "2"};
  for (const char* stage : {"2", "0"}) {
    BOOST_TEST_CONTEXT("saved under --zero-stage " << stage) {
      std::filesystem::remove_all(dir);
      auto flags = with({"--zero-stage", stage});
      flags.insert(flags.end(), saving.begin(), saving.end());
      const auto whole = run_dp(task, 4, 48, flags);
      BOOST_TEST_REQUIRE(whole.finished, whole.report);
      BOOST_TEST_REQUIRE(json_number(whole.report, "steps").value_or(0) == 14);
      // 3 members at --batch 64 keep the 192 examples of a step; every stage takes either.
      expect_resumed_as_whole(task, whole, dir, 10, 3, 64, with({"--zero-stage", "1"}));
      expect_resumed_as_whole(task, whole, dir, 10, 2, 96,
                              with({"--zero-stage", "2", "--shard-backups", "0"}));
      // Stage 0: member 0 takes the pieces whole (and the others take its state).
      expect_resumed_as_whole(task, whole, dir, 10, 2, 96, with({}));
    }
  }
  // SGD keeps no moments: a whole state of it resumes sharded from its step alone.
  std::filesystem::remove_all(dir);
  const std::vector<std::string> sgd = {"--optimizer", "sgd", "--lr", "0.05"};
  auto flags = with(sgd);
  flags.insert(flags.end(), saving.begin(), saving.end());
  const auto whole = run_dp(task, 2, 96, flags);
  BOOST_TEST_REQUIRE(whole.finished, whole.report);
  auto sharded = with(sgd);
  sharded.insert(sharded.end(), {"--zero-stage", "2"});
  expect_resumed_as_whole(task, whole, dir, 10, 3, 64, sharded);
  std::filesystem::remove_all(dir);
}
