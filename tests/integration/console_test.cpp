// troupe-console against real five- and six-process troupe-fmnist jobs on loopback, driven
// with -c as a script would: the views (nodes, buckets, tree, workers, metrics, diag, top),
// the actions (inject-fault, checkpoint, log, export-curve, drain) and a wrong secret. Each
// test starts every process it needs and kills whatever is left when it ends.
#define BOOST_TEST_MODULE console
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "tests/integration/fmnist_cluster.hpp"

using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

// `buckets` explicitly (the default is one per server), so that each server holds several.
std::vector<std::string> job_flags(const std::string& epochs, const std::string& buckets = "4") {
  return {"--train-limit",  "6000", "--test-limit", "2000", "--epochs",  epochs,
          "--blas-threads", "1",    "--log-level",  "warn", "--buckets", buckets};
}

// Runs troupe-console with `args` against the cluster; its exit code and output.
struct console_runner {
  const fmnist_cluster& cluster;
  int runs = 0;

  // `operator_secret` empty: a member's console, which may look but not act.
  std::pair<int, std::string> with_secret(std::vector<std::string> args, const std::string& secret,
                                          const std::string& operator_secret) {
    args.insert(args.begin(), {TROUPE_CONSOLE_BIN, "--connect", cluster.address});
    std::vector<std::string> env{"TROUPE_SECRET=" + secret};
    if (!operator_secret.empty()) env.push_back("TROUPE_OPERATOR_SECRET=" + operator_secret);
    child_process c(
        args, scratch("console-" + cluster.tag + "-" + std::to_string(++runs) + ".log").string(),
        env);
    const int code = c.wait(std::chrono::seconds(60)).value_or(-1);
    return {code, c.output()};
  }
  std::pair<int, std::string> operator()(const std::string& command, bool json = false) {
    std::vector<std::string> args{"-c", command};
    if (json) args.push_back("--json");
    return with_secret(args, cluster.secret(), cluster.operator_secret());
  }
};

// The first row of `actor` (of `kind`, when given) in the tree's --json output; null if none.
troupe::json tree_row(const std::string& tree, const std::string& actor,
                      const std::string& kind = {}) {
  const auto rows = troupe::json::parse(tree, nullptr, false);
  if (!rows.is_array()) return nullptr;
  for (const auto& row : rows)
    if (row.is_object() && row.value("actor", "") == actor &&
        (kind.empty() || row.value("kind", "") == kind))
      return row;
  return nullptr;
}

// Whether the first tree row of `actor` (--json) has a number in its mailbox column.
bool mailbox_is_a_number(const std::string& tree, const std::string& actor) {
  const auto row = tree_row(tree, actor);
  return row.is_object() && row.contains("mailbox") && row["mailbox"].is_number();
}

void kill_all(fmnist_cluster& cluster) {
  cluster.coordinator->kill();
  for (auto& p : cluster.servers) p->kill();
  for (auto& p : cluster.workers) p->kill();
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_console_shows_nodes_buckets_and_the_tree_and_crashes_a_bucket) {
  auto flags = job_flags("30");
  flags.insert(flags.end(), {"--replication", "2"});
  // A floor of 20 ms a batch (28 s): the job outlives every read and action; it is killed after.
  fmnist_cluster cluster{flags, 2, 2, job_floor(2, 20)};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/30", std::chrono::seconds(120)));
  console_runner console{cluster};
  const auto [nodes_code, nodes] = console("nodes");
  BOOST_TEST_INFO("nodes: " << nodes);
  BOOST_TEST(nodes_code == 0);
  BOOST_TEST(nodes.find("coordinator") != std::string::npos);
  BOOST_TEST(nodes.find("server-1-" + cluster.tag) != std::string::npos);
  BOOST_TEST(nodes.find("worker-0-" + cluster.tag) != std::string::npos);
  // Each bucket's vector clock sums to the updates it applied.
  const auto [buckets_code, buckets] = console("buckets", true);
  BOOST_TEST_INFO("buckets: " << buckets);
  BOOST_TEST(buckets_code == 0);
  BOOST_TEST(buckets.rfind("[", 0) == 0u);
  size_t rows = 0;
  for (size_t at = buckets.find("\"applied\": "); at != std::string::npos;
       at = buckets.find("\"applied\": ", at + 1)) {
    const double applied = std::stod(buckets.substr(at + 11));
    const auto sum_at = buckets.find("\"clock_sum\": ", at);
    BOOST_TEST_REQUIRE(sum_at != std::string::npos);
    BOOST_TEST(std::stod(buckets.substr(sum_at + 13)) == applied);
    ++rows;
  }
  BOOST_TEST(rows == 4u);
  BOOST_TEST(count_of(buckets, "\"bytes_in\": ") == 4u);  // from the primaries' metrics
  BOOST_TEST(count_of(buckets, "\"bytes_in\": null") == 0u);
  const auto [workers_code, workers] = console("workers", true);
  BOOST_TEST(workers_code == 0);
  BOOST_TEST(count_of(workers, "\"clock\": ") == 2u, workers);
  // The tree lists every supervisor, bucket and worker with a mailbox size; a crashed
  // bucket's restarts go up.
  const auto [tree_code, tree] = console("tree", true);
  BOOST_TEST_INFO("tree: " << tree);
  BOOST_TEST(tree_code == 0);
  BOOST_TEST(tree.find("\"actor\": \"  server-0-" + cluster.tag + " supervisor\"") !=
             std::string::npos);
  BOOST_TEST(tree.find("\"actor\": \"    worker-1-" + cluster.tag + "\"") != std::string::npos);
  BOOST_TEST(count_of(tree, "\"kind\": \"backup\"") == 4u);
  // Live remote actors' mailboxes are read from their nodes: numbers, not null.
  for (const std::string& actor : {"    worker-1-" + cluster.tag, std::string{"    bucket-0"}})
    BOOST_TEST(mailbox_is_a_number(tree, actor), actor);
  BOOST_TEST(tree_row(tree, "    bucket-0", "bucket").is_object());
  // A member's console sees everything, but changes nothing without the operator secret.
  const auto [member_code, member] =
      console.with_secret({"-c", "inject-fault bucket-0"}, cluster.secret(), "");
  BOOST_TEST(member_code != 0);
  BOOST_TEST(member.find("operator action refused") != std::string::npos, member);
  const auto [wrong_code, wrong] =
      console.with_secret({"-c", "drain worker-1-" + cluster.tag}, cluster.secret(), "wrong");
  BOOST_TEST(wrong_code != 0);
  BOOST_TEST(wrong.find("wrong operator secret") != std::string::npos, wrong);
  const auto [fault_code, fault] = console("inject-fault bucket-0");
  BOOST_TEST(fault_code == 0);
  BOOST_TEST(fault.find("crashed bucket-0") != std::string::npos, fault);
  BOOST_TEST(await(
      [&] {
        const auto row = tree_row(console("tree", true).second, "    bucket-0", "bucket");
        return row.is_object() && row.value("restarts", 0.0) == 1.0;
      },
      std::chrono::seconds(20)));
  const auto [bad_code, bad] = console.with_secret({"-c", "nodes"}, "not-the-secret", "");
  BOOST_TEST(bad_code == 1);
  BOOST_TEST(bad.find("does not know our cluster secret") != std::string::npos, bad);
  kill_all(cluster);
}

BOOST_AUTO_TEST_CASE(metrics_diag_and_the_actions_work_on_a_running_job) {
  const auto checkpoints = scratch("console-checkpoints");
  auto coordinator_flags = job_floor(2, 20);  // 28 s: outlives the reads; killed after them
  coordinator_flags.insert(coordinator_flags.end(), {"--checkpoint-dir", checkpoints.string()});
  fmnist_cluster cluster{job_flags("30"), 2, 2, coordinator_flags};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/30", std::chrono::seconds(120)));
  console_runner console{cluster};
  // Every node's metrics as one exposition that promtool accepts, each sample with its node.
  const auto [metrics_code, metrics] = console("metrics");
  BOOST_TEST_INFO("metrics: " << metrics);
  BOOST_TEST(metrics_code == 0);
  for (const char* node : {"server-0-", "server-1-", "worker-0-", "worker-1-"})
    BOOST_TEST(metrics.find("{node=\"" + std::string{node} + cluster.tag) != std::string::npos);
  BOOST_TEST(metrics.find("troupe_bucket_updates_total{node=\"server-") != std::string::npos);
  BOOST_TEST(metrics.find("troupe_job_batches_total{node=\"coordinator\"}") != std::string::npos);
  BOOST_TEST(count_of(metrics, "# TYPE troupe_bytes_sent_total ") == 1u);
  const auto body = scratch("console-metrics-" + cluster.tag + ".txt");
  std::ofstream(body) << metrics;
  if (::access("/usr/bin/promtool", X_OK) == 0)
    BOOST_TEST(std::system(("/usr/bin/promtool check metrics < " + body.string()).c_str()) == 0);
  const auto only = console("metrics troupe_worker_steps").second;
  BOOST_TEST(only.find("troupe_worker_steps_total{node=\"worker-0-") != std::string::npos, only);
  BOOST_TEST(only.find("troupe_bucket") == std::string::npos, only);
  // The three diagnostics, each with a value, its threshold and a state.
  const auto [diag_code, diag] = console("diag", true);
  BOOST_TEST_INFO("diag: " << diag);
  BOOST_TEST(diag_code == 0);
  std::map<std::string, troupe::json> diagnostics;
  for (const auto& row : parse_json(diag))
    if (row.is_object()) diagnostics[row.value("diagnostic", "")] = row;
  for (const char* name : {"update_variance", "loss_oscillation", "effective_update_ratio"}) {
    BOOST_TEST_REQUIRE(diagnostics.count(name) == 1u, name);
    BOOST_TEST(diagnostics[name]["value"].is_number(), name);
  }
  BOOST_TEST(diagnostics["update_variance"].value("threshold", 0.0) == 0.1);
  BOOST_TEST(diagnostics["effective_update_ratio"].value("value", 0.0) == 1.0);
  // A checkpoint now, the log level, the training curve, top.
  const auto [checkpoint_code, checkpoint] = console("checkpoint");
  BOOST_TEST(checkpoint_code == 0, checkpoint);
  const std::string path = checkpoint.substr(0, checkpoint.find('\n'));
  BOOST_TEST(fs::exists(path), path);
  BOOST_TEST(console("log debug").second.find("log level debug on 5 nodes") != std::string::npos);
  console("workers");  // the coordinator's node now logs at debug: who it admitted
  BOOST_TEST(cluster.coordinator->wait_for_output("admitted console", std::chrono::seconds(30)));
  BOOST_TEST(console("log warn").first == 0);
  const auto [loud_code, loud] = console("log loud");
  BOOST_TEST(loud_code == 1);
  BOOST_TEST(loud.find("no log level 'loud'") != std::string::npos, loud);
  const auto csv = scratch("curve-" + cluster.tag + ".csv");
  BOOST_TEST(console("export-curve " + csv.string()).first == 0);
  const std::string curve = read_file(csv.string());
  BOOST_TEST(curve.rfind("t_s,step,epoch,train_loss,staleness,test_accuracy\n", 0) == 0u, curve);
  BOOST_TEST(count_of(curve, "\n") >= 3u, curve);
  BOOST_TEST(count_of(curve, ",0.") >= 1u, curve);  // an evaluated accuracy
  const auto [top_code, top] = console("top 2");
  BOOST_TEST(top_code == 0, top);
  BOOST_TEST(count_of(top, "diagnostic  ") == 2u, top);
  BOOST_TEST(console("top").first == 1);  // not a terminal: needs a count
  kill_all(cluster);
}

BOOST_AUTO_TEST_CASE(a_drained_worker_and_server_leave_and_nothing_is_lost) {
  // A floor of 10 ms a batch (about 10 s): the drains come well before the job's end.
  fmnist_cluster cluster{job_flags("30", "6"), 2, 3, job_floor(3, 10)};
  BOOST_TEST_REQUIRE(cluster.coordinator->wait_for_output("epoch 1/30", std::chrono::seconds(120)));
  console_runner console{cluster};
  const auto [worker_code, worker] = console("drain worker-2-" + cluster.tag);
  BOOST_TEST(worker_code == 0, worker);
  BOOST_TEST(worker.find("drained worker 'worker-2-") != std::string::npos, worker);
  const auto [server_code, server] = console("drain server-1-" + cluster.tag);
  BOOST_TEST(server_code == 0, server);
  BOOST_TEST(server.find("drained server 'server-1-") != std::string::npos, server);
  // The last server cannot go: nobody could take its buckets.
  const auto [last_code, last] = console("drain server-0-" + cluster.tag);
  BOOST_TEST(last_code == 1, last);
  BOOST_TEST(last.find("no other server") != std::string::npos, last);
  const auto tree = console("tree").second;
  BOOST_TEST(count_of(tree, "drained") == 3u, tree);  // a server, a worker node and its worker
  BOOST_TEST(cluster.workers[2]->wait(std::chrono::seconds(30)).value_or(-1) == 0);
  BOOST_TEST(cluster.servers[1]->wait(std::chrono::seconds(30)).value_or(-1) == 0);
  BOOST_TEST_REQUIRE(cluster.coordinator->wait(std::chrono::seconds(300)).value_or(-1) == 0);
  const std::string report = read_file(cluster.report.string());
  BOOST_TEST_INFO("report: " << report);
  BOOST_TEST(report.find("\"losses\": []") != std::string::npos);
  BOOST_TEST((json_strings(report, "drained") ==
              std::vector<std::string>{"worker-2-" + cluster.tag, "server-1-" + cluster.tag}));
  // Every push of every step was applied exactly once, through the move of the buckets.
  const double steps = json_number(report, "steps").value_or(0);
  BOOST_TEST(steps > 0);
  BOOST_TEST(json_number(report, "updates_applied").value_or(0) == 6 * steps);
  BOOST_TEST(json_number(report, "test_accuracy").value_or(0) >= 0.70);
}
