// A task's gradient that fails is an error, not a NaN loss: run_app (embedded, every actor in
// this process) ends with a non-zero code and the report names the task's error, while a task
// whose loss is merely non-finite trains on with its steps skipped.
#define BOOST_TEST_MODULE task_error
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <unistd.h>

#include "tests/support/scratch.hpp"
#include "troupe/app.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

// Two parameters, a constant gradient; batch `bad_batch` of every epoch fails (or, with
// `diverge`, returns a NaN loss).
class flaky_replica : public task_replica {
 public:
  flaky_replica(uint64_t bad_batch, bool diverge) : bad_(bad_batch), diverge_(diverge) {}
  caf::expected<float> gradient(std::span<const float>, uint32_t, uint64_t batch,
                                std::span<float> grad) override {
    std::fill(grad.begin(), grad.end(), 0.01f);
    if (batch != bad_) return 1.0f;
    if (diverge_) return std::numeric_limits<float>::quiet_NaN();
    return make_error(errc::io_failure, "flaky: cannot read batch " + std::to_string(batch));
  }

 private:
  uint64_t bad_;
  bool diverge_;
};

class flaky_task : public training_task {
 public:
  explicit flaky_task(bool diverge) : diverge_(diverge) {}
  std::vector<tensor_spec> parameters() const override { return {{"w", {2}}}; }
  void initialize(uint64_t, std::span<float> p) const override {
    std::fill(p.begin(), p.end(), 0.0f);
  }
  uint64_t batches_per_epoch(uint32_t) const override { return 20; }
  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t, uint64_t) const override {
    return std::make_unique<flaky_replica>(7, diverge_);
  }
  evaluation evaluate(std::span<const float>) const override { return {0.5, 1.0}; }

 private:
  bool diverge_;
};

struct run_result {
  int code = 0;
  std::string report;
};

run_result run(bool diverge) {
  const auto path = troupe::testing::scratch("task-error.json");
  app_description app;
  app.name = "task-error-test";
  app.make_task =
      [diverge](const launch_options&) -> caf::expected<std::unique_ptr<training_task>> {
    return std::make_unique<flaky_task>(diverge);
  };
  std::vector<std::string> args{"task-error-test", "--epochs", "1",        "--workers",  "1",
                                "--log-level",     "error",    "--report", path.string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  run_result out;
  out.code = run_app(static_cast<int>(argv.size()), argv.data(), app);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  out.report = text.str();
  std::filesystem::remove(path);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_failing_gradient_ends_the_job_with_the_tasks_error) {
  const auto r = run(false);
  BOOST_TEST(r.code != 0);
  BOOST_TEST(r.report.find("\"status\": \"failed\"") != std::string::npos, r.report);
  BOOST_TEST(r.report.find("flaky: cannot read batch 7") != std::string::npos, r.report);
}

BOOST_AUTO_TEST_CASE(a_non_finite_loss_is_a_skipped_step_and_the_job_goes_on) {
  const auto r = run(true);
  BOOST_TEST(r.code == 0);
  BOOST_TEST(r.report.find("\"status\": \"finished\"") != std::string::npos, r.report);
}
