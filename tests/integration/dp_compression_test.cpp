// Data-parallel jobs that compress, accumulate and balance, on the Fashion-MNIST MLP in one
// process: --accumulate 4 of batch 16 is batch 64; bf16 sends half the bytes of fp32 and
// --compress-skip keeps the named tensor's bytes at fp32; 1-bit Adam's compressed steps send
// 20x fewer bytes than its warmup's and 0/1 Adam fewer than 1-bit Adam, the replicas
// identical throughout; --balance gives a slowed member a smaller share and the same update.
#define BOOST_TEST_MODULE dp_compression
#include <boost/test/unit_test.hpp>

#include <csignal>

#include "dp_run.hpp"
#include "tests/support/sigpipe.hpp"

using namespace troupe;
using namespace troupe::testing;

using troupe::testing::ignore_sigpipe;
BOOST_TEST_GLOBAL_FIXTURE(ignore_sigpipe);

namespace {

double number(const dp_run& run, const std::string& path) {
  return json_number(run.report, path).value_or(-1);
}

void check_finished(const dp_run& run) {
  BOOST_TEST_REQUIRE(run.finished);
  BOOST_TEST_REQUIRE(!run.params.empty());
  BOOST_TEST(number(run, "checksum_mismatches") == 0);
  for (float p : run.params) BOOST_TEST_REQUIRE(std::isfinite(p));
}

// Values of the MLP's tensor `name`.
size_t values_of(const training_task& task, const std::string& name) {
  flat_layout layout(task.parameters());
  const int t = layout.find(name);
  BOOST_TEST_REQUIRE(t >= 0);
  const uint64_t end = size_t(t) + 1 < layout.specs.size() ? layout.offsets[t + 1] : layout.total;
  return end - layout.offsets[t];
}

}  // namespace

BOOST_AUTO_TEST_CASE(accumulating_four_micro_batches_is_one_four_times_larger_batch) {
  auto task = fmnist_task_of();
  for (uint32_t workers : {1u, 2u}) {
    BOOST_TEST_CONTEXT(workers << " members") {
      const auto big = run_dp(task, workers, 64);
      const auto micro = run_dp(task, workers, 16, {"--accumulate", "4"});
      check_finished(big);
      check_finished(micro);
      BOOST_TEST(number(micro, "steps") == number(big, "steps"));
      BOOST_TEST(relative_difference(micro.params, big.params) <= 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(bf16_sends_half_the_bytes_and_skipped_tensors_stay_fp32) {
  auto task = fmnist_task_of();
  const auto fp32 = run_dp(task, 2, 64);
  const auto bf16 = run_dp(task, 2, 64, {"--comm-dtype", "bf16"});
  const auto fp16 = run_dp(task, 2, 64, {"--comm-dtype", "fp16"});
  const auto skip = run_dp(task, 2, 64, {"--comm-dtype", "bf16", "--compress-skip", "fc1.w"});
  for (const auto* run : {&fp32, &bf16, &fp16, &skip}) check_finished(*run);
  const double ratio = number(bf16, "allreduce_bytes") / number(fp32, "allreduce_bytes");
  BOOST_TEST((ratio > 0.49 && ratio < 0.52), ratio);
  BOOST_TEST(relative_difference(bf16.params, fp32.params) <= 0.02);
  BOOST_TEST(relative_difference(fp16.params, fp32.params) <= 0.02);
  // Two members: an fp32 allreduce of M values sends 4M bytes per member, a bf16 sum 2M; over
  // 20 steps and both members fc1.w at fp32 adds 2M * 2 * 20 bytes.
  const double kept = double(values_of(*task, "fc1.w"));
  const double extra = number(skip, "allreduce_bytes") - number(bf16, "allreduce_bytes");
  BOOST_TEST(std::abs(extra - 80 * kept) <= 0.01 * 80 * kept, extra << " vs " << 80 * kept);
}

BOOST_AUTO_TEST_CASE(onebit_adam_compresses_after_its_warmup_and_keeps_replicas_identical) {
  auto task = fmnist_task_of();
  const auto adam = run_dp(task, 2, 64, {"--checksum-every", "1"});
  const auto onebit = run_dp(
      task, 2, 64, {"--optimizer", "onebit-adam", "--freeze-step", "5", "--checksum-every", "1"});
  check_finished(adam);
  check_finished(onebit);
  BOOST_TEST(number(onebit, "steps_by_stage.warmup") == 5);
  BOOST_TEST(number(onebit, "steps_by_stage.compressed") == 15);
  const double warm = number(onebit, "allreduce_bytes_by_stage.warmup") / 5;
  const double compressed = number(onebit, "allreduce_bytes_by_stage.compressed") / 15;
  BOOST_TEST(compressed > 0);
  BOOST_TEST(warm / compressed >= 20, warm / compressed);
  BOOST_TEST(number(onebit, "test_accuracy") >= number(adam, "test_accuracy") - 0.05);
  // A kept tensor's momentum is summed in fp32: 4 bytes per value per member (two members).
  const auto kept = run_dp(task, 2, 64,
                           {"--optimizer", "onebit-adam", "--freeze-step", "5", "--compress-skip",
                            "fc1.w", "--checksum-every", "1"});
  check_finished(kept);
  const double fc1 = 8.0 * double(values_of(*task, "fc1.w"));
  const double kept_step = number(kept, "allreduce_bytes_by_stage.compressed") / 15;
  BOOST_TEST((kept_step > fc1 && kept_step < fc1 + 2 * compressed), kept_step << " vs " << fc1);
  // Its warmup is Adam: with the freeze at the last step, 1-bit Adam is Adam.
  const auto all_warm = run_dp(task, 2, 64, {"--optimizer", "onebit-adam", "--freeze-step", "20"});
  check_finished(all_warm);
  BOOST_TEST(relative_difference(all_warm.params, adam.params) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(zero_one_adam_sends_fewer_bytes_than_onebit_adam) {
  auto task = fmnist_task_of();
  const auto onebit = run_dp(task, 2, 64, {"--optimizer", "onebit-adam", "--freeze-step", "6"});
  const auto zero_one =
      run_dp(task, 2, 64,
             {"--optimizer", "zero-one-adam", "--var-freeze-step", "6", "--var-update-scaler", "2",
              "--local-step-scaler", "4", "--local-step-clipper", "4", "--checksum-every", "1"});
  check_finished(onebit);
  check_finished(zero_one);
  BOOST_TEST(number(zero_one, "steps") == 20);
  BOOST_TEST(number(zero_one, "allreduce_bytes") < number(onebit, "allreduce_bytes"));
  BOOST_TEST(number(zero_one, "test_accuracy") >= number(onebit, "test_accuracy") - 0.05);
  // Refreshes at steps 1, 2, 4, 6 are full precision; the 16 others are compressed.
  BOOST_TEST(number(zero_one, "steps_by_stage.warmup") == 4);
  BOOST_TEST(number(zero_one, "steps_by_stage.compressed") == 16);
}

BOOST_AUTO_TEST_CASE(balancing_gives_a_slow_member_less_and_the_same_update) {
  auto task = fmnist_task_of();
  const auto even = run_dp(task, 2, 64, {"--worker-slowdown", "1:3"});
  const auto balanced = run_dp(task, 2, 64, {"--worker-slowdown", "1:3", "--balance"});
  check_finished(even);
  check_finished(balanced);
  BOOST_TEST(std::abs(number(even, "workers.1.batch_share") - 0.5) < 1e-9);
  const double slow = number(balanced, "workers.1.batch_share");
  const double fast = number(balanced, "workers.0.batch_share");
  BOOST_TEST(slow < 0.45, slow);  // about 0.25 once the times settle; the test is short
  BOOST_TEST(std::abs(slow + fast - 1) < 1e-9);
  BOOST_TEST(relative_difference(balanced.params, even.params) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(a_tensor_to_keep_that_the_model_lacks_fails_the_job_with_its_name) {
  auto task = fmnist_task_of();
  const auto run = run_dp(task, 2, 64, {"--compress-skip", "no.such.tensor"});
  BOOST_TEST(!run.finished);
  BOOST_TEST(run.report.find("no.such.tensor") != std::string::npos, run.report);
}
