// Unit tests of the job shell (actors/job/job_shell.hpp), what a coordinator of every mode
// keeps: record_epoch (the report's row, the task's figures, the curve's point, the metrics,
// the throughput line's inputs), the training clock (nothing before training, the time before
// a resumed checkpoint counted), restore_history and note_primary_lost (a takeover's report:
// the standing's history, then the old primary as one loss, counted once), stop_bound (a
// stalled job's members get a heartbeat timeout to answer the stop), and write_report (the
// file when --report is given, nothing otherwise).
#define BOOST_TEST_MODULE job_shell
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "actors/job/job_shell.hpp"
#include "troupe/metrics.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

// A shell whose metrics are a registry's, the terminal's lines going nowhere.
struct shell_with_metrics {
  std::shared_ptr<metrics_registry> registry = std::make_shared<metrics_registry>();
  std::FILE* sink = std::fopen("/dev/null", "w");
  job_shell shell;
  shell_with_metrics() {
    declare_node_metrics(*registry);
    shell.metrics = job_metrics::of(registry);
    shell.display = progress_line{sink};
  }
  ~shell_with_metrics() { std::fclose(sink); }
};

eval_output scored(double accuracy, double loss) {
  eval_output out;
  out.result.accuracy = accuracy;
  out.result.loss = loss;
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_evaluated_epoch_is_a_report_row_a_curve_point_and_metrics) {
  shell_with_metrics s;
  launch_options opts;
  opts.epochs = 3;
  s.shell.phase = job_phase::training;
  s.shell.started = std::chrono::steady_clock::now();
  auto out = scored(0.75, 0.5);
  out.figures = {{"auc", 0.8}};
  record_epoch(s.shell, opts, evaluated_epoch{0, &out, 0.9, 100, 100, 300});
  const auto first = scored(0.8, 0.4);
  record_epoch(s.shell, opts, evaluated_epoch{1, &first, 0.6, 200, 200, 300});
  const auto& epochs = s.shell.report.epochs;
  BOOST_TEST_REQUIRE(epochs.size() == 2u);
  BOOST_TEST(epochs[0].epoch == 1u);
  BOOST_TEST(epochs[0].test_accuracy == 0.75);
  BOOST_TEST(epochs[0].test_loss == 0.5);
  BOOST_TEST(epochs[0].train_loss == 0.9);
  BOOST_TEST(epochs[1].epoch == 2u);
  BOOST_TEST(epochs[1].wall_s >= epochs[0].wall_s);
  BOOST_TEST_REQUIRE(s.shell.report.figures.size() == 1u);  // the epoch that had them
  BOOST_TEST(s.shell.report.figures[0].first == "auc");
  BOOST_TEST(s.shell.curve.points().size() == 2u);
  BOOST_TEST(s.shell.metrics.epochs->value() == 2.0);
  BOOST_TEST(s.shell.metrics.accuracy->value() == 0.8);
}

BOOST_AUTO_TEST_CASE(the_training_clock_counts_nothing_before_training_and_a_resumed_time) {
  job_shell shell;
  BOOST_TEST(shell.training_s() == 0.0);
  shell.resumed_wall_s = 12.5;
  BOOST_TEST(shell.wall_s() == 12.5);  // a job that fails before training: only what it resumed
  shell.started = std::chrono::steady_clock::now() - std::chrono::seconds(3);
  BOOST_TEST(shell.training_s() >= 3.0);
  BOOST_TEST(shell.wall_s() >= 15.5);
  BOOST_TEST(!shell.finishing());
  shell.phase = job_phase::finishing;
  BOOST_TEST(shell.finishing());
}

BOOST_AUTO_TEST_CASE(a_takeover_restores_the_history_and_counts_the_old_primary_once) {
  shell_with_metrics s;
  coordinator_standing x;
  x.term = 3;
  x.losses = {loss_event{"w1", role::worker, 4.0, 1, "no heartbeat"}};
  x.takeovers = {takeover_event{2.0, 0.5, 2}};
  x.workers_lost = {"w1"};
  x.resumed_from_step = 40;
  x.resumed_wall_s = 7.0;
  s.shell.report.losses = {loss_event{"stale", role::server, 1.0, 1, "from before"}};
  restore_history(s.shell, x);
  s.shell.succession.lost_at_s = 9.5;
  note_primary_lost(s.shell, x, "no state for 3000 ms");
  const auto& r = s.shell.report;
  BOOST_TEST_REQUIRE(r.losses.size() == 2u);  // the standing's, then the old primary
  BOOST_TEST(r.losses[0].name == "w1");
  BOOST_TEST(r.losses[1].name == "coordinator (term 3)");
  BOOST_TEST((r.losses[1].kind == role::coordinator));
  BOOST_TEST(r.losses[1].at_s == 9.5);
  BOOST_TEST(r.losses[1].reason == "no state for 3000 ms");
  BOOST_TEST(r.takeovers.size() == 1u);
  BOOST_TEST(r.workers_lost.size() == 1u);
  BOOST_TEST(r.resumed_from_step == 40u);
  BOOST_TEST(s.shell.resumed_wall_s == 7.0);
  BOOST_TEST(s.shell.metrics.lost->value() == 1.0);
}

BOOST_AUTO_TEST_CASE(a_stalled_jobs_members_get_a_heartbeat_timeout_to_answer_the_stop) {
  job_shell shell;
  launch_options o;
  o.request_timeout = std::chrono::seconds(30);
  o.heartbeat_timeout = std::chrono::milliseconds(4000);
  BOOST_TEST(stop_bound(shell, o).count() == 30000);
  shell.report.stalled = true;
  BOOST_TEST(stop_bound(shell, o).count() == 4000);
}

BOOST_AUTO_TEST_CASE(the_report_is_written_where_report_says_and_nowhere_otherwise) {
  const fs::path dir = fs::temp_directory_path() / ("job-shell-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  job_shell shell;
  shell.report.mode = "dp";
  launch_options o;
  const logger log{"test", log_level::error};
  write_report(shell, o, log);  // no --report: nothing, and no error
  BOOST_TEST(fs::is_empty(dir));
  o.report = (dir / "r.json").string();
  write_report(shell, o, log);
  std::ifstream in(o.report);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  BOOST_TEST(text.find("\"mode\"") != std::string::npos);
  fs::remove_all(dir);
}
