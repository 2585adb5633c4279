// Partitions, with real processes in network namespaces that the test makes (network_lab.hpp;
// skipped with a message without root, iproute2 or nftables): a server cut off from the
// coordinator and from the other server, but not from the workers, is declared lost; its
// buckets' backups take over, and it acknowledges no push that they do not have, so every
// acknowledged update is applied exactly once on the copies that serve the job to its end.
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

  explicit partitioned_job(network_lab& l) : lab(l) {
    const std::string coordinator = lab.address(0) + ":" + std::to_string(coordinator_port);
    const std::vector<std::string> flags = {
        "--epochs", "3",          "--blas-threads",    "1", "--log-level", "info", "--replication",
        "2",        "--insecure", "--request-timeout", "10"};
    start(0,
          {"--role", "coordinator", "--listen", coordinator, "--servers", "2", "--workers", "2",
           "--report", report.string()},
          flags);
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
        lab.command(i, fmnist_command(head, flags)),
        scratch("partition-" + std::to_string(i) + "-" + tag + ".log").string(), env));
  }
  child_process& coordinator() { return *nodes[0]; }
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
