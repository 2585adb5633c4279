// Every job ends and says why: run_app (embedded, every actor in this process) with a C++ task
// that fails at one point, in every mode, against the outcome the table below documents
// (docs/fault-tolerance.md, "Every job ends"). A failing gradient ends the job with the task's
// error; a non-finite loss is a skipped step and the job goes on, unless
// --max-consecutive-skipped-steps says otherwise; a gradient that blocks forever is a stall
// that the watchdog ends, naming what each worker was doing; a model without tables trains in
// --mode hybrid as in dp.
#define BOOST_TEST_MODULE failure_matrix
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <ostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/progress.hpp"
#include "tests/support/scratch.hpp"
#include "troupe/app.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using json = nlohmann::json;

namespace {

enum class fault {
  replica_error,      // make_replica fails
  initialize_nan,     // initialize leaves a NaN (what a Python initialize that raised leaves)
  gradient_error,     // the gradient of batch 7 fails
  malformed_example,  // batch 7 holds an example the task cannot read
  nan_at_one_batch,   // batch 7's loss is NaN
  nan_from_a_batch,   // every loss from batch 7 on is NaN
  evaluate_nan,       // the evaluation's figures are NaN
  deadlock,           // batch 7's gradient never returns (until the test ends)
  one_deadlock,       // as deadlock, in the first worker's share of it only
};

// Released by the test once the job's report is written: a "deadlocked" gradient then
// returns, so that the job's actor system can finish shutting down.
struct gate {
  std::mutex mutex;
  std::condition_variable opened;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lock{mutex};
    opened.wait(lock, [&] { return open; });
  }
  void release() {
    std::lock_guard<std::mutex> lock{mutex};
    open = true;
    opened.notify_all();
  }
};

constexpr uint64_t bad_batch = 7;

// Two parameters, a constant gradient; batch 7 of every epoch (examples 7 x B on, B the
// replica's batch: one worker's step in every mode) fails as `what` says.
class flaky_replica : public range_replica {
 public:
  flaky_replica(uint32_t batch, fault what, std::shared_ptr<gate> stuck)
      : range_replica(batch), batch_(batch), what_(what), stuck_(std::move(stuck)) {}
  caf::expected<range_result> gradient_range(std::span<const float>, uint32_t, uint64_t first,
                                             uint32_t count, std::span<float> grad,
                                             const gradient_ready&) override {
    const uint64_t examples = uint64_t{20} * 64;
    if (first >= examples) return range_result{0.0f, 0};
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(count, examples - first));
    // (dp's members share a batch: the first member's share starts on a multiple of it)
    const bool first_share = first % batch_ == 0;
    auto loss = loss_of(first / batch_, first_share, grad);
    if (!loss) return std::move(loss.error());
    return range_result{*loss, n};
  }
  std::vector<std::vector<uint64_t>> rows_of_range(uint32_t, uint64_t, uint32_t) override {
    return {};
  }
  caf::expected<range_result> gradient_range(std::span<const float> params, sparse_rows_view&,
                                             uint32_t epoch, uint64_t first, uint32_t count,
                                             std::span<float> grad) override {
    return gradient_range(params, epoch, first, count, grad, {});
  }

 private:
  caf::expected<float> loss_of(uint64_t batch, bool first_share, std::span<float> grad) {
    std::fill(grad.begin(), grad.end(), 0.01f);
    const bool bad = what_ == fault::nan_from_a_batch ? batch >= bad_batch : batch == bad_batch;
    if (!bad) return 1.0f;
    switch (what_) {
      case fault::gradient_error:
        return make_error(errc::io_failure, "flaky: cannot read batch " + std::to_string(batch));
      case fault::malformed_example:
        return make_error(errc::malformed_message, "flaky: example 3 of batch 7 is malformed");
      case fault::replica_error:
      case fault::initialize_nan:
      case fault::evaluate_nan:
        return 1.0f;
      case fault::deadlock:
        stuck_->wait();
        return 1.0f;
      case fault::one_deadlock:
        if (first_share) stuck_->wait();
        return 1.0f;
      default:
        return std::numeric_limits<float>::quiet_NaN();
    }
  }

  uint32_t batch_;
  fault what_;
  std::shared_ptr<gate> stuck_;
};

class flaky_task : public training_task {
 public:
  flaky_task(fault what, std::shared_ptr<gate> stuck) : what_(what), stuck_(std::move(stuck)) {}
  std::vector<tensor_spec> parameters() const override { return {{"w", {2}}}; }
  void initialize(uint64_t, std::span<float> p) const override {
    std::fill(p.begin(), p.end(), what_ == fault::initialize_nan ? NAN : 0.0f);
  }
  uint64_t batches_per_epoch(uint32_t batch) const override { return 20 * 64 / batch; }
  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                            uint64_t) const override {
    if (what_ == fault::replica_error)
      return make_error(errc::io_failure, "flaky: no training data here");
    return std::make_unique<flaky_replica>(batch, what_, stuck_);
  }
  evaluation evaluate(std::span<const float>) const override {
    if (what_ == fault::evaluate_nan) return {NAN, NAN};
    return {0.5, 1.0};
  }

 private:
  fault what_;
  std::shared_ptr<gate> stuck_;
};

struct run_result {
  int code = 0;
  json report;
};

run_result run(const std::string& mode, fault what, std::vector<std::string> extra = {}) {
  const auto path = troupe::testing::scratch("failure-matrix-" + mode + ".json");
  auto stuck = std::make_shared<gate>();
  app_description app;
  app.name = "failure-matrix-test";
  app.in_library = true;  // run_app in the test's process, which goes on after it
  app.make_task = [what,
                   stuck](const launch_options&) -> caf::expected<std::unique_ptr<training_task>> {
    return std::make_unique<flaky_task>(what, stuck);
  };
  // One batch per step in every mode (dp's step is --batch x the workers).
  std::vector<std::string> args{"failure-matrix-test", "--mode", mode,       "--epochs",   "1",
                                "--log-level",         "error",  "--report", path.string()};
  if (std::find(extra.begin(), extra.end(), "--workers") == extra.end())
    extra.insert(extra.end(), {"--workers", "1"});
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  // The report is written before the job stops its members: the stuck one may go then.
  std::atomic<bool> ended{false};
  std::thread release([&] {
    troupe::testing::await([&] { return ended || std::filesystem::exists(path); });
    stuck->release();
  });
  run_result out;
  out.code = run_app(static_cast<int>(argv.size()), argv.data(), app);
  ended = true;
  release.join();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  out.report = json::parse(text.str(), nullptr, false);
  std::filesystem::remove(path);
  return out;
}

const std::vector<std::string> modes{"ps", "dp", "hybrid", "diloco"};

// One row of the matrix: a failure point, the flags it runs with, and the outcome every mode
// documents for it (docs/fault-tolerance.md, "Every job ends").
struct cell {
  const char* name;
  fault what;
  std::vector<std::string> flags;
  const char* status;  // finished | failed | stalled
  const char* reason;  // in `failure` (failed, stalled); "" for none
  int skipped;         // the report's skipped_steps; -1: not checked
};

std::ostream& operator<<(std::ostream& out, const cell& c) {
  return out << c.name;
}

std::string text_of(const json& value) {
  return value.is_string() ? value.get<std::string>() : "";
}

const std::vector<cell> cells{
    {"make_replica fails", fault::replica_error, {}, "failed", "flaky: no training data here", -1},
    {"initialize leaves NaN",
     fault::initialize_nan,
     {},
     "failed",
     "the task's initialize left values that are not finite",
     -1},
    {"the gradient fails", fault::gradient_error, {}, "failed", "flaky: cannot read batch 7", -1},
    {"a malformed example",
     fault::malformed_example,
     {},
     "failed",
     "flaky: example 3 of batch 7 is malformed",
     -1},
    {"a NaN loss", fault::nan_at_one_batch, {}, "finished", "", 1},
    {"NaN losses in a row past the limit",
     fault::nan_from_a_batch,
     {"--max-consecutive-skipped-steps", "3"},
     "failed",
     "3 steps in a row",
     3},
    {"evaluate gives NaN", fault::evaluate_nan, {}, "finished", "", 0},
    // The watchdog's bound is max(--stall-timeout, 10 x the slowest step): a step of this
    // task takes microseconds, so the job stalls a second after its worker blocked.
    {"a deadlock in user code",
     fault::deadlock,
     {"--stall-timeout", "1"},
     "stalled",
     "stalled: no progress",
     -1},
    {"a deadlock in one of two workers",
     fault::one_deadlock,
     {"--stall-timeout", "1", "--workers", "2"},
     "stalled",
     "stalled: no progress",
     -1},
};

}  // namespace

// Every mode, every failure point: the job ends with its documented outcome.
BOOST_DATA_TEST_CASE(every_failure_point_ends_the_job_as_documented,
                     boost::unit_test::data::make(modes) * boost::unit_test::data::make(cells),
                     mode, c) {
  const auto r = run(mode, c.what, c.flags);
  BOOST_TEST_REQUIRE(r.report.is_object(), mode << " / " << c.name);
  BOOST_TEST(r.report["status"] == c.status, r.report.dump());
  BOOST_TEST((r.code == 0) == (std::string{c.status} == "finished"), r.code);
  if (*c.reason)
    BOOST_TEST(text_of(r.report["failure"]).find(c.reason) != std::string::npos,
               r.report["failure"]);
  if (c.skipped >= 0) BOOST_TEST(r.report["skipped_steps"] == c.skipped, r.report.dump());
  if (c.what == fault::nan_at_one_batch) {
    BOOST_TEST_REQUIRE(r.report["workers"].size() == 1u);
    BOOST_TEST(r.report["workers"][0]["skipped_steps"] == 1);
    BOOST_TEST_REQUIRE(r.report["epochs"].size() == 1u);
    BOOST_TEST(!r.report["epochs"][0]["train_loss"].is_null());  // finite: the NaN is not in it
  }
  if (c.what == fault::deadlock || c.what == fault::one_deadlock) {
    // The stuck worker (worker-0 alone; of two, whichever held the batch) says where it is.
    int stuck = 0;
    for (const auto& [member, record] : r.report["stall"].items())
      if (record["waiting_on"] == "user code: gradient" && record["since_s"] >= 1.0) ++stuck;
    BOOST_TEST(stuck == 1, r.report["stall"].dump());
    if (c.what == fault::deadlock) BOOST_TEST(r.report["stall"].contains("worker-0"));
  }
}

BOOST_AUTO_TEST_CASE(a_model_without_tables_trains_in_hybrid_as_in_dp) {
  const auto r = run("hybrid", fault::nan_at_one_batch);
  BOOST_TEST(r.code == 0);
  BOOST_TEST_REQUIRE(r.report.is_object());
  BOOST_TEST(r.report["status"] == "finished");
  BOOST_TEST(r.report["mode"] == "dp");
  BOOST_TEST(r.report["epochs"].size() == 1u);
}
