// Fault tolerance with real processes (troupe-fmnist on all of Fashion-MNIST, 3 epochs, on
// loopback): kill -9 of a worker, kill -9 of a server with --replication 2 and of two servers
// at once with --replication 3 (promotion, no update lost), buckets crashed on purpose until their
// node's supervisor gives up (restarts with state intact, escalation), and checkpoints: every
// process killed, --resume, and a damaged newest checkpoint. Each test starts every process it
// needs and kills what is left.
#define BOOST_TEST_MODULE fault
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <fstream>

#include "tests/integration/fmnist_cluster.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/detail/operator_proof.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"

using namespace troupe;
using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

uint64_t unix_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// Waits for the coordinator to end with 0 and returns the report.
std::string finished_report(fmnist_cluster& cluster) {
  const auto code = cluster.coordinator->wait(full_job_time);
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  return read_file(cluster.report.string());
}

// An operator's connection to a running job, as the console makes it.
struct operator_client {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<caf::scoped_actor> self;
  coordinator_actor coordinator;
  std::string operator_secret;

  explicit operator_client(const fmnist_cluster& cluster)
      : operator_secret(cluster.operator_secret()) {
    launch_options opts;
    opts.threads = 1;
    configure_actor_system(cfg, opts);
    sys = std::make_unique<caf::actor_system>(cfg);
    self = std::make_unique<caf::scoped_actor>(*sys);
    opts.coordinators = {*parse_host_port(cluster.address)};
    opts.secret = cluster.secret();
    auto joined = join_cluster(*sys, opts, role::console, "test-operator",
                               logger{"operator", log_level::error});
    if (joined) coordinator = *joined;
  }

  // As `troupe-console -c "inject-fault ACTOR"` with the operator secret.
  std::string inject_fault(const std::string& actor) {
    std::string out, nonce;
    auto failed = [&](caf::error& err) { out = "error: " + describe(err); };
    (*self)
        ->request(coordinator, std::chrono::seconds(10), nonce_atom_v)
        .receive([&](std::string& n) { nonce = std::move(n); }, failed);
    auto proven = prove_action(nonce, {"inject-fault", actor}, "", operator_secret);
    if (!proven) return "error: " + describe(proven.error());
    (*self)
        ->request(coordinator, std::chrono::seconds(10), operate_atom_v, encode(*proven))
        .receive([&](std::string& done) { out = std::move(done); }, failed);
    return out;
  }

  // A view of the console ("buckets", "tree", ...) as the coordinator answers it.
  table_view view(const std::string& name) {
    table_view out;
    (*self)
        ->request(coordinator, std::chrono::seconds(20), inspect_atom_v, name)
        .receive(
            [&](const wire& w) {
              if (auto t = decode<table_view>(w)) out = std::move(*t);
            },
            [](caf::error&) {});
    return out;
  }

  // The current handle of a bucket other than `old`, once the coordinator has one.
  bucket_actor bucket(uint32_t id, const bucket_actor& old = {}) {
    bucket_actor out;
    (*self)
        ->request(coordinator, std::chrono::seconds(20), which_atom_v, id, old)
        .receive([&](bucket_actor& now) { out = std::move(now); }, [](caf::error&) {});
    return out;
  }

  bucket_stats stats(const bucket_actor& bucket) {
    bucket_stats out;
    (*self)
        ->request(bucket, std::chrono::seconds(10), stats_atom_v)
        .receive(
            [&](const wire& w) {
              if (auto s = decode<bucket_stats>(w)) out = std::move(*s);
            },
            [](caf::error&) {});
    return out;
  }
};

// The checkpoint files in `dir`, oldest first, and the step in a file's name.
std::vector<fs::path> checkpoint_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".troupe") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

uint64_t step_of(const fs::path& file) {
  return std::stoull(file.stem().string().substr(5));
}

}  // namespace

BOOST_AUTO_TEST_CASE(kill_9_of_a_worker_halfway_the_job_completes_and_reports_it) {
  fmnist_cluster cluster{full_ps_job({})};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  BOOST_TEST_REQUIRE(cluster.await_batches(1.5 * full_job_batches_per_epoch()));  // halfway
  cluster.workers[1]->kill();
  const std::string report = finished_report(cluster);
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
  const auto lost = json_strings(report, "workers_lost");
  BOOST_TEST((lost.size() == 1 && lost[0].rfind("worker-1-", 0) == 0));
  const auto losses = parse_json(report).value("losses", troupe::json::array());
  BOOST_TEST_REQUIRE(losses.size() == 1u);
  BOOST_TEST(losses[0].value("role", "") == "worker");
  BOOST_TEST(losses[0].contains("at_s"));
  BOOST_TEST(cluster.workers[0]->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(a_crashed_worker_is_restarted_by_its_node_and_rejoins_cold) {
  fmnist_cluster cluster{full_ps_job({})};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  operator_client op{cluster};
  BOOST_TEST_REQUIRE(static_cast<bool>(op.coordinator));
  const std::string name = "worker-1-" + cluster.tag;
  BOOST_TEST(op.inject_fault(name) == "crashed worker " + name);
  const std::string report = finished_report(cluster);
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "restarts").value_or(0) == 1);
  BOOST_TEST((json_strings(report, "workers_lost") == std::vector<std::string>{name}));
  // The restarted worker did part of the work under the same name.
  const auto second = report.find("\"name\": \"" + name + "\"", report.find("\"workers\": ["));
  BOOST_TEST(report.find("\"name\": \"" + name + "\"", second + 1) != std::string::npos);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
  BOOST_TEST(cluster.workers[1]->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(kill_9_of_a_replicated_server_loses_no_update) {
  fmnist_cluster cluster{full_ps_job({"--replication", "2"}), 3};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  const uint64_t killed_at = unix_ms();
  cluster.servers[1]->kill();
  const std::string report = finished_report(cluster);
  // Every push of every step was applied exactly once, through the promotion.
  check_every_update_applied_once(report);
  // From the kill to every bucket served again: detection plus promotion.
  const double recovery = json_number(report, "recovery_s").value_or(99);
  const double detected_at = json_number(report, "at_unix_ms").value_or(0);
  BOOST_TEST(recovery < 3.0);
  BOOST_TEST((detected_at - double(killed_at)) / 1000.0 + recovery < 3.0);
  for (auto* node : {cluster.servers[0].get(), cluster.servers[2].get(), cluster.workers[0].get(),
                     cluster.workers[1].get()})
    BOOST_TEST(node->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(with_replication_3_two_servers_killed_at_once_lose_no_update) {
  // A floor of 3 ms a batch: the job runs on (2.8 s and more) past the promotion and the view.
  fmnist_cluster cluster{full_ps_job({"--replication", "3"}), 4, 2, job_floor(2, 3)};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/3", full_job_time));
  // Bucket 0's primary and the first backup of its chain: the third copy must take over.
  operator_client op{cluster};
  const auto buckets = op.view("buckets");
  BOOST_TEST_REQUIRE(buckets.rows.size() == 4u);
  const std::string primary = buckets.rows[0][1], chain = buckets.rows[0][2];
  BOOST_TEST_REQUIRE(std::count(chain.begin(), chain.end(), ',') == 1, chain);
  const std::string first_backup = chain.substr(0, chain.find(','));
  const std::string third = chain.substr(chain.find(',') + 1);
  for (size_t i = 0; i < 4; ++i) {
    const std::string name = "server-" + std::to_string(i) + "-" + cluster.tag;
    if (name == primary || name == first_backup) cluster.servers[i]->kill();
  }
  // Once the coordinator has promoted every bucket's copy, the view names the third copy (a
  // view asked before that would wait on the dead servers' buckets).
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("every bucket is served again",
                                                          std::chrono::seconds(60)));
  std::string now_primary;
  BOOST_TEST(await(
                 [&] {
                   const auto after = op.view("buckets");
                   if (!after.rows.empty()) now_primary = after.rows[0][1];
                   return now_primary == third;
                 },
                 std::chrono::seconds(60)),
             "bucket 0's primary: " << now_primary << ", not " << third);
  check_every_update_applied_once(finished_report(cluster));
  for (auto* node : {cluster.workers[0].get(), cluster.workers[1].get()})
    BOOST_TEST(node->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(without_replication_a_lost_servers_buckets_come_back_from_a_checkpoint) {
  const fs::path dir = scratch("restore-checkpoints");
  fs::remove_all(dir);
  fmnist_cluster cluster{
      full_ps_job({"--checkpoint-dir", dir.string(), "--checkpoint-every", "300"})};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("checkpoint after step", full_job_time));
  // Updates after the newest checkpoint, and well before the next one (300 batches on).
  const std::string log = cluster.coordinator->output();
  const auto at = log.rfind("checkpoint after step ") + std::string("checkpoint after step ").size();
  BOOST_TEST_REQUIRE(cluster.await_batches(std::stod(log.substr(at)) + 40));
  cluster.servers[0]->kill();
  const std::string report = finished_report(cluster);
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(cluster.coordinator->output().find("restoring its buckets from the checkpoint") !=
             std::string::npos);
  BOOST_TEST(json_number(report, "updates_lost").value_or(0) > 0);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
}

BOOST_AUTO_TEST_CASE(crashed_buckets_restart_with_their_state_until_the_supervisor_escalates) {
  // Four crashes and their restarts: the job's floor (5 ms a batch) keeps it running past them.
  fmnist_cluster cluster{full_ps_job({"--replication", "2", "--restart-period-ms", "120000"}), 3, 2,
                         job_floor(2, 5)};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("training:", full_job_time));
  operator_client op{cluster};
  BOOST_TEST_REQUIRE(static_cast<bool>(op.coordinator));
  auto bucket = op.bucket(0);
  BOOST_TEST_REQUIRE(static_cast<bool>(bucket));
  for (int crash = 1; crash <= 3; ++crash) {
    const uint64_t before = op.stats(bucket).version;
    BOOST_TEST(op.inject_fault("bucket-0").find("crashed bucket-0") == 0u);
    auto restarted = op.bucket(0, bucket);
    BOOST_TEST_REQUIRE(static_cast<bool>(restarted));
    BOOST_TEST((restarted.address() != bucket.address()));
    // The restarted actor kept the store: its update count went on from where it was.
    BOOST_TEST(op.stats(restarted).version >= before);
    bucket = restarted;
  }
  // The fourth crash within the period is one too many: the node's supervisor gives up, its
  // server goes, and the backups of its buckets take over.
  BOOST_TEST(op.inject_fault("bucket-0").find("crashed bucket-0") == 0u);
  BOOST_TEST(op.inject_fault("no-such-actor").find("error: bad_configuration") == 0u);
  const std::string report = finished_report(cluster);
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(json_number(report, "restarts").value_or(0) == 3);
  BOOST_TEST(json_number(report, "escalations").value_or(0) == 1);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
  BOOST_TEST(report.find("\"role\": \"server\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_killed_job_resumes_from_its_checkpoint_and_skips_a_damaged_one) {
  const fs::path dir = scratch("checkpoints");
  fs::remove_all(dir);
  const auto flags =
      full_ps_job({"--checkpoint-every", "400", "--checkpoint-dir", dir.string(), "--resume", ""});
  uint64_t newest = 0;
  {
    fmnist_cluster first{flags};
    // Two checkpoints, then every process of the job is killed.
    BOOST_TEST_REQUIRE(first.coordinator->wait_for_output("checkpoint after step", full_job_time, 2));
    for (auto* p : {first.coordinator.get(), first.servers[0].get(), first.servers[1].get(),
                    first.workers[0].get(), first.workers[1].get()})
      p->kill();
  }
  auto files = checkpoint_files(dir);
  BOOST_TEST_REQUIRE(files.size() >= 2u);
  newest = step_of(files.back());

  auto resume_flags = flags;
  resume_flags.back() = dir.string();  // --resume DIR
  {
    fmnist_cluster resumed{resume_flags};
    const std::string report = finished_report(resumed);
    BOOST_TEST_INFO("report: " << report);
    BOOST_TEST(json_number(report, "resumed_from_step").value_or(0) == double(newest));
    BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
    // No batch applied twice: those counted before the checkpoint came back with the buckets.
    BOOST_TEST(json_number(report, "updates_applied").value_or(0) +
                   json_number(report, "updates_rejected").value_or(0) +
                   json_number(report, "updates_skipped").value_or(0) ==
               4 * json_number(report, "steps").value_or(0));
  }
  // The resumed job wrote checkpoints of its own. Flip one byte in the middle of the newest:
  // the one before it is used.
  files = checkpoint_files(dir);
  BOOST_TEST_REQUIRE(files.size() >= 2u);
  const uint64_t older = step_of(files[files.size() - 2]);
  {
    std::fstream f(files.back(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto middle = f.tellg() / 2;
    f.seekg(middle);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(middle);
    f.write(&c, 1);
  }
  const fs::path report = scratch("resumed-again.json");
  child_process job(fmnist_command({"--resume", dir.string(), "--report", report.string()},
                                   paced_data(full_ps_job({}))),
                    scratch("resumed-again.log").string());
  const auto code = job.wait(full_job_time);
  BOOST_TEST_INFO("output: " << job.output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  const std::string damaged = files.back().filename().string();
  BOOST_TEST(job.output().find("skipping a damaged checkpoint: corrupt_data: " + damaged) !=
             std::string::npos);
  BOOST_TEST(job.output().find("checksum mismatch") != std::string::npos);
  const std::string text = read_file(report.string());
  BOOST_TEST_INFO("report: " << text);
  BOOST_TEST(json_number(text, "resumed_from_step").value_or(0) == double(older));
  BOOST_TEST(json_number(text, "test_accuracy").value_or(0) >= full_job_accuracy_bar());
}
