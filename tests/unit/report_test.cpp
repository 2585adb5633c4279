// Unit tests of the job report: histogram_quantile (empty, one entry, known histograms, q = 1),
// summarize_buckets (sums, mean staleness, histograms of different lengths merged, largest
// clock gap), and write_report_file (a well-formed JSON file in a temporary directory, no
// temporary file left behind, errc::io_failure where the file cannot be written).
#define BOOST_TEST_MODULE report
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "actors/records/report.hpp"
#include "messages/json.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/options.hpp"

using namespace troupe;
using troupe::testing::is_error;
namespace fs = std::filesystem;

namespace {

bucket_stats stats_of(uint64_t applied, uint64_t rejected, uint64_t max_staleness,
                      uint64_t staleness_sum, std::vector<uint64_t> histogram, uint64_t gap) {
  bucket_stats s;
  s.updates_applied = applied;
  s.updates_rejected = rejected;
  s.max_staleness = max_staleness;
  s.staleness_sum = staleness_sum;
  s.staleness_histogram = std::move(histogram);
  s.max_clock_gap = gap;
  return s;
}

// A fresh directory under the system's temporary directory, removed with everything in it.
struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "troupe-report-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path = pattern;
  }
  ~temp_dir() {
    std::error_code ignored;
    if (!path.empty()) fs::remove_all(path, ignored);
  }
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// The file's JSON document (nlohmann's parser); discarded when it is not one.
json parse_file(const fs::path& path) {
  return json::parse(read_all(path), nullptr, false);
}

job_report sample_report() {
  job_report r;
  r.test_accuracy = 0.875;
  r.steps = 1200;
  r.updates_applied = 1200;
  r.mean_staleness = 1.5;
  r.staleness_p50 = 1;
  r.staleness_p99 = 4;
  r.max_staleness = 6;
  r.max_clock_gap = 2;
  r.workers = {{"worker-0", 600, 0.9}, {"say \"hi\"\\", 600, 0.8}};
  r.workers[0].peak_rss_mb = 512.5;
  r.servers = {{"server-0", 2048.0}};
  r.coordinator_peak_rss_mb = 96.25;
  r.epochs = {{1, 0.8, 0.5, 0.6, 10.0}, {2, 0.875, 0.4, 0.45, 20.0}};
  return r;
}

}  // namespace

// -- histogram_quantile -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(quantile_of_no_counts_is_zero) {
  BOOST_TEST(histogram_quantile({}, 0.5) == 0.0);
  BOOST_TEST(histogram_quantile({}, 1.0) == 0.0);
  BOOST_TEST(histogram_quantile({0, 0, 0}, 0.99) == 0.0);
}

BOOST_AUTO_TEST_CASE(quantile_of_a_single_entry_is_that_entry) {
  BOOST_TEST(histogram_quantile({5}, 0.5) == 0.0);
  BOOST_TEST(histogram_quantile({5}, 1.0) == 0.0);
  BOOST_TEST(histogram_quantile({0, 0, 7, 0}, 0.5) == 2.0);
  BOOST_TEST(histogram_quantile({0, 0, 7, 0}, 0.99) == 2.0);
}

BOOST_AUTO_TEST_CASE(quantile_p50_and_p99_of_a_known_histogram) {
  const std::vector<uint64_t> h = {50, 30, 15, 4, 1};  // 100 counts
  BOOST_TEST(histogram_quantile(h, 0.5) == 0.0);       // exactly half at 0
  BOOST_TEST(histogram_quantile(h, 0.75) == 1.0);
  BOOST_TEST(histogram_quantile(h, 0.99) == 3.0);
  BOOST_TEST(histogram_quantile(h, 0.995) == 4.0);
}

BOOST_AUTO_TEST_CASE(quantile_p50_moves_past_an_exact_half) {
  BOOST_TEST(histogram_quantile({1, 1}, 0.5) == 0.0);
  BOOST_TEST(histogram_quantile({1, 2}, 0.5) == 1.0);
  BOOST_TEST(histogram_quantile({0, 3, 3, 4}, 0.5) == 2.0);
}

BOOST_AUTO_TEST_CASE(quantile_one_is_the_largest_counted_entry) {
  BOOST_TEST(histogram_quantile({50, 30, 15, 4, 1}, 1.0) == 4.0);
  BOOST_TEST(histogram_quantile({1, 1, 0, 0}, 1.0) == 1.0);  // trailing empty entries
}

// -- summarize_buckets --------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(summarize_sums_counters_and_merges_histograms) {
  // Merged histogram {2, 1, 0, 2}: five pushes, staleness sum 1 + 6 = 7.
  const auto a = stats_of(2, 1, 1, 1, {1, 1}, 2);
  const auto b = stats_of(3, 2, 3, 6, {1, 0, 0, 2}, 1);
  for (const auto& buckets : {std::vector<bucket_stats>{a, b}, std::vector<bucket_stats>{b, a}}) {
    job_report r;
    summarize_buckets(buckets, r);
    BOOST_TEST(r.updates_applied == 5u);
    BOOST_TEST(r.updates_rejected == 3u);
    BOOST_TEST(r.mean_staleness == 7.0 / 5.0, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(r.staleness_p50 == 1.0);
    BOOST_TEST(r.staleness_p99 == 3.0);
    BOOST_TEST(r.max_staleness == 3u);
    BOOST_TEST(r.max_clock_gap == 2u);
  }
}

BOOST_AUTO_TEST_CASE(summarize_of_no_buckets_leaves_zeros) {
  job_report r;
  summarize_buckets({}, r);
  BOOST_TEST(r.updates_applied == 0u);
  BOOST_TEST(r.updates_rejected == 0u);
  BOOST_TEST(r.mean_staleness == 0.0);
  BOOST_TEST(r.staleness_p50 == 0.0);
  BOOST_TEST(r.staleness_p99 == 0.0);
  BOOST_TEST(r.max_staleness == 0u);
  BOOST_TEST(r.max_clock_gap == 0u);
}

BOOST_AUTO_TEST_CASE(summarize_of_a_bucket_with_nothing_applied_has_mean_zero) {
  job_report r;
  summarize_buckets({stats_of(0, 4, 0, 0, std::vector<uint64_t>(65, 0), 0)}, r);
  BOOST_TEST(r.updates_rejected == 4u);
  BOOST_TEST(r.mean_staleness == 0.0);
  BOOST_TEST(r.staleness_p99 == 0.0);
}

// -- write_report_file --------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(write_report_file_writes_a_json_document) {
  temp_dir dir;
  BOOST_TEST_REQUIRE(!dir.path.empty());
  const fs::path path = dir.path / "report.json";
  launch_options opts;
  opts.secret = "never-in-the-report";
  opts.app["data"] = "/d";
  BOOST_TEST_REQUIRE(!write_report_file(path.string(), sample_report(), flag_settings(opts)));
  BOOST_TEST_REQUIRE(fs::exists(path));
  BOOST_TEST(!fs::exists(path.string() + ".tmp"));
  const std::string text = read_all(path);
  json doc = parse_file(path);
  BOOST_TEST_REQUIRE(doc.is_object(), text);
  BOOST_TEST(doc["staleness"]["mean"].get<double>() == 1.5);
  BOOST_TEST(doc["staleness"]["p99"].get<double>() == 4.0);
  BOOST_TEST(doc["max_clock_gap"].get<uint64_t>() == 2u);
  BOOST_TEST_REQUIRE(doc["workers"].size() == 2u);
  BOOST_TEST(doc["workers"][1]["name"].get<std::string>() == "say \"hi\"\\");  // escaped name
  BOOST_TEST(doc["workers"][0]["peak_rss_mb"].get<double>() == 512.5);
  BOOST_TEST_REQUIRE(doc["servers"].size() == 1u);
  BOOST_TEST(doc["servers"][0]["name"].get<std::string>() == "server-0");
  BOOST_TEST(doc["servers"][0]["peak_rss_mb"].get<double>() == 2048.0);
  BOOST_TEST(doc["coordinator_peak_rss_mb"].get<double>() == 96.25);
  BOOST_TEST_REQUIRE(doc["epochs"].size() == 2u);
  BOOST_TEST(doc["epochs"][1]["test_accuracy"].get<double>() == 0.875);
  BOOST_TEST(doc["status"].get<std::string>() == "finished");
  // settings: the effective value of every flag, the app's too, and never the secret
  auto& settings = doc["settings"];
  BOOST_TEST(settings["workers"].get<std::string>() == "2");
  BOOST_TEST(settings["optimizer"].get<std::string>() == "adam");
  BOOST_TEST(settings["consistency"].get<std::string>() == "async");
  BOOST_TEST(settings["data"].get<std::string>() == "/d");
  BOOST_TEST(settings["secret"].get<std::string>() == "(set)");
  BOOST_TEST(text.find("never-in-the-report") == std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(write_report_file_replaces_an_older_report) {
  temp_dir dir;
  BOOST_TEST_REQUIRE(!dir.path.empty());
  const fs::path path = dir.path / "report.json";
  auto report = sample_report();
  BOOST_TEST_REQUIRE(!write_report_file(path.string(), report, {}));
  report.steps = 98765;
  BOOST_TEST_REQUIRE(!write_report_file(path.string(), report, {}));
  json doc = parse_file(path);
  BOOST_TEST_REQUIRE(doc.is_object(), read_all(path));
  BOOST_TEST(doc["steps"].get<uint64_t>() == 98765u);
  BOOST_TEST(!fs::exists(path.string() + ".tmp"));
}

BOOST_AUTO_TEST_CASE(write_report_file_to_an_unwritable_path_is_an_io_failure) {
  temp_dir dir;
  BOOST_TEST_REQUIRE(!dir.path.empty());
  const fs::path path = dir.path / "no-such-directory" / "report.json";
  BOOST_TEST(is_error(write_report_file(path.string(), sample_report(), {}), errc::io_failure));
  BOOST_TEST(!fs::exists(path));
}

// When the final rename fails (here: the target is an existing directory), the temporary
// file must not be left behind.
BOOST_AUTO_TEST_CASE(write_report_file_that_cannot_move_leaves_no_temporary_file) {
  temp_dir dir;
  BOOST_TEST_REQUIRE(!dir.path.empty());
  const fs::path path = dir.path / "report.json";
  fs::create_directory(path);  // rename() cannot replace a directory with a file
  BOOST_TEST_REQUIRE(
      is_error(write_report_file(path.string(), sample_report(), {}), errc::io_failure));
  BOOST_TEST(!fs::exists(path.string() + ".tmp"));
}

// A write error that appears only when the buffered text is flushed on close (a full disk)
// must be reported, not moved into place. Here the temporary file is a link to /dev/full,
// which takes the open and the buffered write but fails the flush.
BOOST_AUTO_TEST_CASE(write_report_file_reports_a_write_error_on_close) {
  if (!fs::exists("/dev/full")) return;  // not Linux: nothing to inject the fault with
  temp_dir dir;
  BOOST_TEST_REQUIRE(!dir.path.empty());
  const fs::path path = dir.path / "report.json";
  fs::create_symlink("/dev/full", path.string() + ".tmp");
  BOOST_TEST(is_error(write_report_file(path.string(), sample_report(), {}), errc::io_failure));
}

BOOST_AUTO_TEST_CASE(skipped_steps_in_a_row_fail_at_the_limit_and_a_finite_step_resets_them) {
  job_report report;
  uint64_t in_a_row = 0;
  BOOST_TEST(!count_skipped_step(true, "worker-1", in_a_row, 3, report));
  BOOST_TEST(!count_skipped_step(true, "worker-1", in_a_row, 3, report));
  BOOST_TEST(!count_skipped_step(false, "worker-1", in_a_row, 3, report));  // resets
  BOOST_TEST(in_a_row == 0u);
  BOOST_TEST(!count_skipped_step(true, "worker-1", in_a_row, 3, report));
  BOOST_TEST(!count_skipped_step(true, "worker-1", in_a_row, 3, report));
  const auto why = count_skipped_step(true, "worker-1", in_a_row, 3, report);
  BOOST_TEST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("worker-1 skipped 3 steps in a row") == 0u, *why);
  BOOST_TEST(report.skipped_steps == 5u);
  uint64_t group = 0;  // no limit: never fails
  for (int i = 0; i < 100; ++i)
    BOOST_TEST(!count_skipped_step(true, "the group", group, 0, report));
}
