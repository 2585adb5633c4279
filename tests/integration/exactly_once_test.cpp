// Each batch applied at most once per bucket under kills, with real processes on loopback (all
// of Fashion-MNIST, 3 epochs, --replication 2, a standby coordinator): a fixed-seed random
// schedule kills workers, a server and, last, the primary coordinator with SIGKILL at points of
// progress (the job's batches), starting a replacement worker or server after each of theirs; a
// server kill waits until every bucket has a live backup again (the console's buckets view).
// The job finishes with nothing lost, and every bucket counted every chunk exactly once:
// applied + rejected + skipped = buckets x steps, a lost worker's chunks done again by others
// acknowledged as duplicates, not applied twice. TROUPE_SOAK_SEED picks another schedule
// (tests/soak/exactly_once_soak.sh runs many). Also: a replacement server is admitted and holds
// copies again, with and without a takeover.
#define BOOST_TEST_MODULE exactly_once_test
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "tests/integration/fmnist_cluster.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr double buckets = 4;

enum class victim { worker, server, coordinator };

struct kill_step {
  double at_batch = 0;  // the job's batches done when it fires
  victim who = victim::worker;
};

// `kills` (4 or more) kills between 10% and 75% of the job: workers, one server (neither the
// first nor the last kill, so that workers' chunks are redone before and after the chains
// re-grow) and, last, the primary coordinator (its standby's counts start afresh, so no kill
// waits on them).
std::vector<kill_step> schedule(uint32_t seed, int kills, double total_batches) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<double> at{0.10 * total_batches, 0.75 * total_batches};
  std::vector<kill_step> steps(kills);
  for (auto& s : steps) s.at_batch = std::floor(at(rng));
  std::sort(steps.begin(), steps.end(),
            [](const kill_step& a, const kill_step& b) { return a.at_batch < b.at_batch; });
  steps[1 + rng() % (kills - 2)].who = victim::server;
  steps.back().who = victim::coordinator;
  return steps;
}

uint32_t seed_of_run() {
  const char* text = std::getenv("TROUPE_SOAK_SEED");
  return text ? static_cast<uint32_t>(std::stoul(text)) : 7;
}

// The console's buckets view as JSON rows (empty when the coordinator does not answer).
troupe::json buckets_view(const fmnist_cluster& cluster, int run) {
  child_process console(
      {TROUPE_CONSOLE_BIN, "--connect", cluster.address, "-c", "buckets", "--json"},
      scratch("console-" + cluster.tag + "-" + std::to_string(run) + ".log").string(),
      {cluster.env[0]});
  if (console.wait(std::chrono::seconds(60)).value_or(-1) != 0) return troupe::json::array();
  const auto rows = parse_json(console.output());
  return rows.is_array() ? rows : troupe::json::array();
}

// A text cell of a view's row ("" when it is empty, "-" or not text).
std::string cell(const troupe::json& row, const std::string& column) {
  if (!row.is_object() || !row.contains(column) || !row[column].is_string()) return "";
  const auto text = row[column].get<std::string>();
  return text == "-" || text == "?" ? "" : text;
}

// Whether every bucket has a primary and at least one live backup.
bool every_bucket_backed_up(const troupe::json& rows) {
  if (rows.size() != buckets) return false;
  return std::all_of(rows.begin(), rows.end(),
                     [](const troupe::json& r) { return !cell(r, "backup").empty(); });
}

// The index of a live process in `processes` picked by `rng`.
size_t live_one(std::vector<std::unique_ptr<child_process>>& processes, std::mt19937& rng) {
  std::vector<size_t> live;
  for (size_t i = 0; i < processes.size(); ++i)
    if (!processes[i]->wait(std::chrono::seconds(0))) live.push_back(i);
  BOOST_TEST_REQUIRE(!live.empty());
  return live[rng() % live.size()];
}

}  // namespace

BOOST_AUTO_TEST_CASE(kills_with_replacements_apply_every_chunk_once_per_bucket) {
  const uint32_t seed = seed_of_run();
  BOOST_TEST_MESSAGE("seed " << seed);
  // A floor of 2 ms a batch (about 2.8 s for the three epochs of 469 batches a worker): the
  // kills and replacements come long before the job's end.
  fmnist_cluster cluster{full_ps_job({"--replication", "2"}), 3, 3, job_floor(3, 2), true};
  BOOST_TEST_REQUIRE(cluster.standby->wait_for_output("following the coordinator", full_job_time));
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("training:", full_job_time));
  std::mt19937 rng{seed};
  int views = 0;
  for (const auto& step : schedule(seed, 5, 3 * full_job_batches_per_epoch())) {
    BOOST_TEST_REQUIRE(cluster.await_batches(step.at_batch), "batch " << step.at_batch);
    if (step.who == victim::coordinator) {
      BOOST_TEST_MESSAGE("at batch " << step.at_batch << ": kill the primary coordinator");
      cluster.coordinator->kill();
      BOOST_TEST_REQUIRE(cluster.standby->wait_for_output("took over as the coordinator",
                                                          std::chrono::seconds(60)));
      continue;
    }
    if (step.who == victim::worker) {
      const size_t w = live_one(cluster.workers, rng);
      BOOST_TEST_MESSAGE("at batch " << step.at_batch << ": kill worker " << w);
      cluster.workers[w]->kill();
      cluster.workers[w]->wait(std::chrono::seconds(10));  // reaped: not picked again
      cluster.start_worker();
      continue;
    }
    const size_t s = live_one(cluster.servers, rng);
    BOOST_TEST_MESSAGE("at batch " << step.at_batch << ": kill server " << s);
    cluster.servers[s]->kill();
    cluster.servers[s]->wait(std::chrono::seconds(10));
    // The coordinator noticed, promoted, and grew every chain back on the servers left.
    BOOST_TEST_REQUIRE(
        cluster.coordinator->wait_for_output("lost server", std::chrono::seconds(60)));
    BOOST_TEST_REQUIRE(await([&] { return every_bucket_backed_up(buckets_view(cluster, ++views)); },
                             std::chrono::seconds(120)));
  }
  const auto code = cluster.standby->wait(full_job_time);
  BOOST_TEST_INFO("coordinator: " << cluster.standby->output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  const std::string report = read_file(cluster.report.string());
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "updates_lost").value_or(-1) == 0);
  BOOST_TEST(report_array(report, "takeovers").size() == 1u);
  const double steps = json_number(report, "steps").value_or(0);
  BOOST_TEST(steps == 3 * full_job_batches_per_epoch());
  const double counted = json_number(report, "updates_applied").value_or(0) +
                         json_number(report, "updates_rejected").value_or(0) +
                         json_number(report, "updates_skipped").value_or(0);
  BOOST_TEST(counted == buckets * steps);
  BOOST_TEST(json_number(report, "duplicate_pushes").value_or(-1) >= 0);
  BOOST_TEST_MESSAGE(
      "duplicate pushes acknowledged: " << json_number(report, "duplicate_pushes").value_or(-1));
  // Trained, though with five kills and staler pushes than the fault tests' jobs.
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= 0.80);
}

namespace {

// Whether `server` holds a copy (primary or backup) of some bucket in the buckets view.
bool holds_copies(const troupe::json& rows, const std::string& server) {
  return std::any_of(rows.begin(), rows.end(), [&](const troupe::json& r) {
    return cell(r, "primary") == server || cell(r, "backup").find(server) != std::string::npos;
  });
}

// Of a job's two servers (--replication 2), kills server 0 once the job is under way: every
// bucket is left with one copy, on server 1. Starts a replacement and waits until it holds a
// copy of every bucket's chain again; then the job must finish with nothing lost and every
// chunk counted once per bucket.
void replace_a_server(fmnist_cluster& cluster, child_process& coordinator) {
  cluster.servers[0]->kill();
  cluster.servers[0]->wait(std::chrono::seconds(10));
  BOOST_TEST_REQUIRE(coordinator.wait_for_output("lost server", std::chrono::seconds(60)));
  const std::string replacement = fmt::format("server-{}-{}", cluster.servers.size(), cluster.tag);
  cluster.start_server();
  int views = 0;
  BOOST_TEST_REQUIRE(await(
      [&] {
        const auto rows = buckets_view(cluster, ++views);
        return every_bucket_backed_up(rows) && holds_copies(rows, replacement);
      },
      std::chrono::seconds(120)));
  const auto code = coordinator.wait(full_job_time);
  BOOST_TEST_INFO("coordinator: " << coordinator.output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  const std::string report = read_file(cluster.report.string());
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "updates_lost").value_or(-1) == 0);
  const double steps = json_number(report, "steps").value_or(0);
  BOOST_TEST(json_number(report, "updates_applied").value_or(0) +
                 json_number(report, "updates_rejected").value_or(0) +
                 json_number(report, "updates_skipped").value_or(0) ==
             buckets * steps);
  BOOST_TEST(cluster.servers.back()->wait(std::chrono::seconds(60)).value_or(-1) == 0);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_replacement_server_is_admitted_and_holds_copies_again) {
  fmnist_cluster cluster{full_ps_job({"--replication", "2"}), 2, 2, job_floor(2, 3)};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  replace_a_server(cluster, *cluster.coordinator);
}

BOOST_AUTO_TEST_CASE(after_a_takeover_a_replacement_server_is_admitted_and_holds_copies) {
  fmnist_cluster cluster{full_ps_job({"--replication", "2"}), 2, 2, job_floor(2, 3), true};
  BOOST_TEST_REQUIRE(cluster.standby->wait_for_output("following the coordinator", full_job_time));
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  cluster.coordinator->kill();
  BOOST_TEST_REQUIRE(
      cluster.standby->wait_for_output("took over as the coordinator", std::chrono::seconds(60)));
  // The console asks the new coordinator from now on.
  cluster.address = cluster.standby_address;
  replace_a_server(cluster, *cluster.standby);
}
