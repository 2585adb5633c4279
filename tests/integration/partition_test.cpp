// Partitions, with real processes in network namespaces that the test makes (network_lab.hpp;
// skipped with a message without root, iproute2 or nftables): a server cut off from the
// coordinator and from the other server, but not from the workers, is declared lost; its
// buckets' backups take over, and it acknowledges no push that they do not have, so every
// acknowledged update is applied exactly once on the copies that serve the job to its end. And a
// standby coordinator cut off from its primary, but not the members, takes over in vain: no
// member rejoins it, it gives up, and the primary finishes the job alone.
#define BOOST_TEST_MODULE partition_test
#include <boost/test/unit_test.hpp>

#include "tests/integration/fmnist_cluster.hpp"
#include "tests/integration/network_lab.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr auto job_time = std::chrono::seconds(300);
constexpr uint16_t coordinator_port = 7600;

// A 2-server, 2-worker job with --replication 2, each process in its own namespace:
// node 0 the coordinator, 1 and 2 the servers, 3 and 4 the workers.
struct partitioned_job {
  network_lab& lab;
  std::string tag = std::to_string(::getpid());
  std::filesystem::path report = scratch("partition-" + tag + ".json");
  std::vector<std::string> env = {"TROUPE_SECRET=a-long-random-secret-for-tests"};
  std::vector<std::unique_ptr<child_process>> nodes;

  partitioned_job(network_lab& l, bool start_nodes = true) : lab(l) {
    if (!start_nodes) return;
    const std::string coordinator = lab.address(0) + ":" + std::to_string(coordinator_port);
    const std::vector<std::string> flags = {
        "--epochs", "3",          "--blas-threads",    "1",  "--log-level", "info", "--replication",
        "2",        "--insecure", "--request-timeout", "10", "--buckets",   "4"};
    auto head = job_floor(2, 2);  // the job's floor: two epochs after the first take 1.9 s
    head.insert(head.end(), {"--role", "coordinator", "--listen", coordinator, "--servers", "2",
                             "--workers", "2", "--report", report.string()});
    start(0, head, flags);
    for (size_t s = 1; s <= 2; ++s)
      start(s,
            {"--role", "server", "--coordinator", coordinator, "--listen", lab.address(s) + ":0",
             "--name", "server-" + std::to_string(s)},
            flags);
    for (size_t w = 3; w <= 4; ++w)
      start(w,
            {"--role", "worker", "--coordinator", coordinator, "--name",
             "worker-" + std::to_string(w)},
            flags);
  }

  void start(size_t i, const std::vector<std::string>& head,
             const std::vector<std::string>& flags) {
    nodes.push_back(std::make_unique<child_process>(
        lab.command(i, fmnist_command(head, paced_data(flags))),
        scratch("partition-" + std::to_string(i) + "-" + tag + ".log").string(), env));
  }
  child_process& coordinator() { return *nodes[0]; }
};

// The same job with a standby: node 0 the primary, 1 the standby, 2 and 3 the servers, 4 and 5
// the workers, which are given both coordinators.
struct job_with_standby : partitioned_job {
  explicit job_with_standby(network_lab& l) : partitioned_job(l, false) {
    const std::string primary = lab.address(0) + ":" + std::to_string(coordinator_port);
    const std::string standby = lab.address(1) + ":" + std::to_string(coordinator_port);
    const std::vector<std::string> flags = {"--epochs",
                                            "3",
                                            "--blas-threads",
                                            "1",
                                            "--log-level",
                                            "info",
                                            "--replication",
                                            "2",
                                            "--insecure",
                                            "--request-timeout",
                                            "10",
                                            "--takeover-timeout-ms",
                                            "3000",
                                            "--buckets",
                                            "4"};
    auto coordinator = job_floor(2, 2);  // the job's floor, as above
    coordinator.insert(coordinator.end(), {"--role", "coordinator", "--servers", "2", "--workers",
                                           "2", "--report", report.string()});
    auto head = coordinator;
    head.insert(head.end(), {"--listen", primary});
    start(0, head, flags);
    head = coordinator;
    head.insert(head.end(), {"--listen", standby, "--standby-of", primary});
    start(1, head, flags);
    for (size_t i = 2; i <= 5; ++i) {
      const bool server = i <= 3;
      std::vector<std::string> member = {
          "--role",        server ? "server" : "worker",
          "--coordinator", primary + "," + standby,
          "--name",        (server ? "server-" : "worker-") + std::to_string(i)};
      if (server) member.insert(member.end(), {"--listen", lab.address(i) + ":0"});
      start(i, member, flags);
    }
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(
    a_server_cut_off_from_the_coordinator_and_its_peer_loses_no_acknowledged_update) {
  network_lab lab{5};
  if (!lab.ready()) {
    BOOST_TEST_MESSAGE("skipped: " << lab.why());
    return;
  }
  partitioned_job job{lab};
  BOOST_TEST_REQUIRE(job.coordinator().wait_for_output("epoch 1/3", job_time),
                     job.coordinator().output());
  // Server 1 keeps its workers and loses the coordinator (silently: only missing heartbeats
  // tell) and server 2, whose buckets it backs up and which backs up its buckets (with resets:
  // its primaries see their backups go down at once, and must still not go on alone).
  BOOST_TEST_REQUIRE(lab.cut(1, 0));
  BOOST_TEST_REQUIRE(lab.cut(1, 2, network_lab::cut_kind::reset));
  const auto code = job.coordinator().wait(job_time);
  const std::string out = job.coordinator().output();
  BOOST_TEST_INFO("coordinator: " << out);
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  BOOST_TEST(out.find("lost server 'server-1' (no heartbeat") != std::string::npos);
  // Every push of every step is on the copies that served to the end, once: the cut-off server
  // acknowledged none that its promoted backups do not have.
  check_every_update_applied_once(read_file(job.report.string()));
  for (size_t w = 3; w <= 4; ++w)
    BOOST_TEST(job.nodes[w]->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(a_standby_cut_off_from_its_primary_alone_gives_up_and_the_job_goes_on) {
  network_lab lab{6};
  if (!lab.ready()) {
    BOOST_TEST_MESSAGE("skipped: " << lab.why());
    return;
  }
  job_with_standby job{lab};
  child_process& standby = *job.nodes[1];
  BOOST_TEST_REQUIRE(standby.wait_for_output("following the coordinator", job_time),
                     standby.output());
  BOOST_TEST_REQUIRE(job.coordinator().wait_for_output("epoch 1/3", job_time),
                     job.coordinator().output());
  // The standby stops hearing from its primary (or sees it go down) and takes over.
  BOOST_TEST_REQUIRE(lab.cut(0, 1, network_lab::cut_kind::reset));
  const auto gave_up = standby.wait(std::chrono::seconds(60));
  BOOST_TEST_INFO("standby: " << standby.output());
  BOOST_TEST_REQUIRE(gave_up.has_value());
  BOOST_TEST(*gave_up != 0);
  BOOST_TEST(standby.output().find("no member rejoined") != std::string::npos);
  const auto code = job.coordinator().wait(job_time);
  BOOST_TEST_INFO("coordinator: " << job.coordinator().output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  const std::string report = read_file(job.report.string());
  check_every_update_applied_once(report);
  const auto doc = parse_json(report);
  BOOST_TEST((doc.contains("takeovers") && doc["takeovers"].empty()));
  for (size_t i = 2; i <= 5; ++i)
    BOOST_TEST(job.nodes[i]->wait(std::chrono::seconds(30)).value_or(-1) == 0);
}
