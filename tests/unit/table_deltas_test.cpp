// The stream of changed rows (--export-dir, troupe/table_deltas.hpp): a file comes back as it
// was written and a damaged one is refused; a table cuts what changed (and what it evicted)
// since its last cut; a follower applies evictions before rows, starts from the newest
// snapshot, waits at a gap, and ends equal to the bucket it follows; a snapshot compacts the
// files before it; a new writer takes the next generation.
#define BOOST_TEST_MODULE table_deltas
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/row_export.hpp"
#include "tests/support/scratch.hpp"
#include "tests/unit/expect_error.hpp"
#include "tests/unit/optimizer_configs.hpp"
#include "troupe/table_deltas.hpp"

using namespace troupe;
using troupe::testing::fails_with;
using troupe::testing::sgd;
using troupe::testing::succeeded;
namespace fs = std::filesystem;

namespace {

bucket_spec exporting(const std::string& dir, const std::string& evict, uint64_t capacity) {
  bucket_spec spec{0, 1, sgd(0.5f), {}, {}};
  spec.tables.push_back(table_config{"emb", 2, 0.1f, capacity, *parse_eviction(evict), 1});
  spec.bucket_count = 1;
  spec.seed = 3;
  spec.export_dir = dir;
  spec.export_snapshot_every = 4;
  return spec;
}

std::vector<row_request> rows(uint64_t first, uint64_t count) {
  std::vector<uint64_t> ids(count);
  for (uint64_t i = 0; i < count; ++i) ids[i] = first + i;
  return {row_request{"emb", ids}};
}

push_request push_of(const std::vector<row_request>& read, uint64_t clock, float g) {
  push_request push{0, 0, clock, vector_clock{1}};
  const auto& ids = read[0].ids;
  push.sparse.push_back(sparse_rows{"emb", 2, ids, std::vector<float>(ids.size() * 2, g)});
  return push;
}

// An empty folder `name` in the test's scratch folder.
std::string fresh_dir(const std::string& name) {
  const auto dir = troupe::testing::scratch(name);
  fs::remove_all(dir);
  return dir.string();
}

// The exporter of a bucket that answered a pull as its primary: it writes.
row_exporter writer_of(const bucket_store& store) {
  row_exporter exporter{store.config()};
  exporter.served();
  return exporter;
}

// Every row `store` holds, as a follower would show it.
followed_table held(const bucket_store& store) {
  followed_table out;
  out.row_dim = 2;
  for (const auto& part : store.save()) {
    auto decoded = decode<bucket_state_part>(part);
    if (!decoded || decoded->type != bucket_state_part::kind::rows) continue;
    out.ids.insert(out.ids.end(), decoded->rows.ids.begin(), decoded->rows.ids.end());
    out.values.insert(out.values.end(), decoded->rows.values.begin(), decoded->rows.values.end());
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_file_comes_back_as_written_and_a_damaged_one_is_refused) {
  const auto dir = fresh_dir("deltas-format");
  delta_file file{3, 2, 7, 1234, false, {table_delta{"emb", 2, {9, 10}, {4, 5}, {1, 2, 3, 4}}}};
  BOOST_TEST_REQUIRE(!write_delta(dir, file));
  const std::string path = delta_path(dir, file);
  BOOST_TEST(fs::path(path).filename().string() == "0000000002-000000000007.delta");
  auto back = read_delta(path);
  BOOST_TEST_REQUIRE(succeeded(back));
  BOOST_TEST(back->bucket == 3u);
  BOOST_TEST(back->clock == 1234u);
  BOOST_TEST(back->tables[0].evicted == file.tables[0].evicted, boost::test_tools::per_element());
  BOOST_TEST(back->tables[0].values == file.tables[0].values, boost::test_tools::per_element());
  BOOST_TEST(next_generation(dir, 3) == 3u);
  BOOST_TEST(next_generation(dir, 4) == 1u);
  {  // one byte flipped
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  BOOST_TEST(fails_with(read_delta(path), errc::corrupt_data));
  fs::resize_file(path, 20);
  BOOST_TEST(fails_with(read_delta(path), errc::corrupt_data));
  BOOST_TEST(fails_with(read_delta((fs::path(dir) / "absent.delta").string()), errc::io_failure));
  BOOST_TEST(fails_with(read_deltas((fs::path(dir) / "absent").string()), errc::io_failure));
}

// A bucket exporting while it trains, evicts and admits: a follower that polls after every
// file ends with exactly the bucket's rows, and so does one that reads the directory once.
BOOST_AUTO_TEST_CASE(a_follower_of_every_file_ends_equal_to_the_bucket) {
  const auto dir = fresh_dir("deltas-follow");
  bucket_store store{exporting(dir, "lru", 40)};
  auto exporter = writer_of(store);
  delta_follower follower{dir};
  uint64_t clock = 0;
  for (int round = 0; round < 11; ++round) {
    for (int step = 0; step < 5; ++step) {
      const auto read = rows(uint64_t(round * 7 + step * 3) % 60, 12);
      BOOST_TEST_REQUIRE(succeeded(store.read_rows(read, 0)));
      BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(read, clock++, 0.1f * float(step) - 0.2f))));
    }
    BOOST_TEST_REQUIRE(!exporter.write_next(store));
    auto applied = follower.poll();
    BOOST_TEST_REQUIRE(succeeded(applied));
    BOOST_TEST(*applied == 1u);
    const auto now = held(store);
    const auto followed = follower.tables()["emb"];
    BOOST_TEST(followed.ids == now.ids, boost::test_tools::per_element());
    BOOST_TEST(followed.values == now.values, boost::test_tools::per_element());
  }
  BOOST_TEST(store.stats().tables[0].rows_evicted > 0u);
  // Snapshots every 4th file (1, 5, 9) remove the files before them: 9, 10 and 11 are left.
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(fs::path(dir) / "bucket-00000"))
    files += f.path().extension() != ".tmp";
  BOOST_TEST(files == 3u);
  auto once = read_deltas(dir);
  BOOST_TEST_REQUIRE(succeeded(once));
  BOOST_TEST((*once)["emb"].ids == held(store).ids, boost::test_tools::per_element());
  BOOST_TEST(follower.clocks()[0] == store.stats().version);
}

BOOST_AUTO_TEST_CASE(an_id_evicted_and_created_again_within_one_file_ends_present) {
  const auto dir = fresh_dir("deltas-readd");
  bucket_store store{exporting(dir, "lru", 10)};
  auto exporter = writer_of(store);
  BOOST_TEST_REQUIRE(succeeded(store.read_rows(rows(0, 10), 0)));
  BOOST_TEST_REQUIRE(!exporter.write_next(store));                  // the snapshot: 0..9
  BOOST_TEST_REQUIRE(succeeded(store.read_rows(rows(10, 10), 0)));  // 0..9 evicted
  BOOST_TEST_REQUIRE(succeeded(store.read_rows(rows(0, 1), 0)));    // 0 back again
  BOOST_TEST_REQUIRE(!exporter.write_next(store));
  delta_file last{0, 1, 2, 0, false, {}};
  auto delta = read_delta(delta_path(dir, last));
  BOOST_TEST_REQUIRE(succeeded(delta));
  const auto& t = delta->tables[0];
  BOOST_TEST((std::find(t.evicted.begin(), t.evicted.end(), 0u) != t.evicted.end()));
  BOOST_TEST((std::find(t.ids.begin(), t.ids.end(), 0u) != t.ids.end()));
  auto followed = read_deltas(dir);
  BOOST_TEST_REQUIRE(succeeded(followed));
  BOOST_TEST((*followed)["emb"].ids == held(store).ids, boost::test_tools::per_element());
}

// A new writer (a promoted backup) starts a generation with a snapshot; a follower behind it
// goes to that snapshot, and one that finds a gap in a generation waits for a snapshot.
BOOST_AUTO_TEST_CASE(a_new_generation_starts_from_a_snapshot_and_a_gap_waits) {
  const auto dir = fresh_dir("deltas-generations");
  const table_delta one{"emb", 1, {}, {1}, {1.0f}}, two{"emb", 1, {}, {2}, {2.0f}};
  BOOST_TEST_REQUIRE(!write_delta(dir, delta_file{0, 1, 1, 10, true, {one}}));
  delta_follower follower{dir};
  BOOST_TEST(*follower.poll() == 1u);
  BOOST_TEST_REQUIRE(!write_delta(dir, delta_file{0, 1, 3, 30, false, {two}}));  // 2 missing
  BOOST_TEST(*follower.poll() == 0u);
  BOOST_TEST(follower.tables()["emb"].ids == std::vector<uint64_t>{1},
             boost::test_tools::per_element());
  BOOST_TEST(next_generation(dir, 0) == 2u);
  BOOST_TEST_REQUIRE(!write_delta(dir, delta_file{0, 2, 1, 25, true, {two}}));
  BOOST_TEST(*follower.poll() == 1u);
  BOOST_TEST(follower.tables()["emb"].ids == std::vector<uint64_t>{2},
             boost::test_tools::per_element());
  BOOST_TEST(follower.clocks()[0] == 25u);
}
