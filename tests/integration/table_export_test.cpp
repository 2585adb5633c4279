// --export-dir with real processes (troupe-ctr, 3 servers, 2 workers, --replication 2, LFU
// eviction and admission): a follower that polls the stream of changed rows while the job
// runs, through the kill -9 of a server a third of the way in, ends with the tables that the
// job's last files hold (read afresh) and with as many rows as the report counts.
#define BOOST_TEST_MODULE table_export
#include <boost/test/unit_test.hpp>

#include "tests/integration/fmnist_cluster.hpp"
#include "troupe/table_deltas.hpp"

using namespace troupe;
using namespace troupe::testing;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(a_follower_of_every_file_ends_with_the_tables_through_a_server_kill) {
  const auto dir = scratch("export");
  fs::remove_all(dir);
  const std::vector<std::string> flags = {"--train-examples",
                                          "60000",
                                          "--test-examples",
                                          "2000",
                                          "--vocabulary",
                                          "20000",
                                          "--fm-dim",
                                          "2",
                                          "--epochs",
                                          "3",
                                          "--replication",
                                          "2",
                                          "--buckets",
                                          "6",
                                          "--export-dir",
                                          dir.string(),
                                          "--export-every",
                                          "1",
                                          "--evict",
                                          "lfu",
                                          "--capacity",
                                          "40000",
                                          "--admit-after",
                                          "2",
                                          "--reference=false",
                                          "--blas-threads",
                                          "1",
                                          "--log-level",
                                          "info"};
  fmnist_cluster cluster{flags, 3, 2, job_floor(2, 15), false, TROUPE_CTR_BIN, "--train-examples"};
  delta_follower follower{dir.string()};
  const double batches = 3 * std::ceil(double(paced_count(60000)) / 256);
  BOOST_TEST_REQUIRE(cluster.await_batches(batches / 3));
  BOOST_TEST_REQUIRE(bool(follower.poll()));
  cluster.servers[1]->kill();
  std::optional<int> code;
  while (!(code = cluster.coordinator->wait(std::chrono::seconds(1))))
    BOOST_TEST_REQUIRE(bool(follower.poll()));
  BOOST_TEST_INFO("coordinator: " << cluster.coordinator->output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  for (auto* node : {cluster.servers[0].get(), cluster.servers[2].get(), cluster.workers[0].get(),
                     cluster.workers[1].get()})
    BOOST_TEST(node->wait(std::chrono::seconds(30)).value_or(-1) == 0);
  BOOST_TEST_REQUIRE(bool(follower.poll()));  // the files the buckets wrote as they ended

  const auto report = parse_json(read_file(cluster.report.string()));
  BOOST_TEST_INFO("report: " << report.dump());
  BOOST_TEST(report["losses"].size() == 1u);
  auto fresh = read_deltas(dir.string());
  BOOST_TEST_REQUIRE(bool(fresh));
  const auto followed = follower.tables();
  for (const std::string table : {"w", "v"}) {
    BOOST_TEST_INFO("table " << table);
    BOOST_TEST_REQUIRE(followed.count(table) == 1u);
    const auto& mine = followed.at(table);
    const auto& theirs = fresh->at(table);
    BOOST_TEST(mine.ids == theirs.ids, boost::test_tools::per_element());
    BOOST_TEST(mine.values == theirs.values, boost::test_tools::per_element());
    const auto counted = report["tables"][table];
    BOOST_TEST(double(mine.ids.size()) == counted["rows"].get<double>());
    BOOST_TEST(counted["ids_not_admitted"].get<double>() > 0);
    BOOST_TEST(mine.ids.size() > 1000u);
  }
}
