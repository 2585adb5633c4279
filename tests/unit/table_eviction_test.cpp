// Eviction and admission of embedding rows (issue 59): the policies' parsing and checks, what
// lru, lfu and ttl keep, admit_after's sightings and dropped gradients, an evicted id starting
// again from its initial value, a backup that mirrors its primary's reads and evictions holding
// the same rows, saved state that goes on deciding the same, the codec's new fields, and the
// counters a bucket reports.
#define BOOST_TEST_MODULE table_eviction
#include <boost/test/unit_test.hpp>

#include <numeric>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/sparse_table.hpp"
#include "messages/codec.hpp"
#include "tests/unit/expect_error.hpp"
#include "tests/unit/optimizer_configs.hpp"
#include "troupe/detail/layout.hpp"

using namespace troupe;
using troupe::testing::fails_with;
using troupe::testing::is_error;
using troupe::testing::sgd;
using troupe::testing::succeeded;

namespace {

table_config table(const std::string& evict, uint64_t capacity, uint32_t admit_after = 1) {
  return table_config{"emb", 2, 0.1f, capacity, *parse_eviction(evict), admit_after};
}

sparse_table one_bucket(const table_config& config, optimizer_config o = sgd(0.5f)) {
  return sparse_table{config, 0, 1, 7, o, 0.0f};
}

std::vector<uint64_t> range(uint64_t first, uint64_t count) {
  std::vector<uint64_t> out(count);
  std::iota(out.begin(), out.end(), first);
  return out;
}

bool holds(const sparse_table& t, uint64_t id) {
  for (const auto& part : t.save(1 << 20))
    for (uint64_t held : part.ids)
      if (held == id) return true;
  return false;
}

std::vector<float> initial(uint64_t id) {
  std::vector<float> out(2);
  init_row(7, "emb", id, 0.1f, out);
  return out;
}

sparse_rows gradient(const std::vector<uint64_t>& ids, float g) {
  return sparse_rows{"emb", 2, ids, std::vector<float>(ids.size() * 2, g)};
}

}  // namespace

BOOST_AUTO_TEST_CASE(policies_parse_and_bad_tables_are_refused_with_a_reason) {
  BOOST_TEST((parse_eviction("lru")->type == eviction_policy::kind::lru));
  BOOST_TEST((parse_eviction("lfu")->type == eviction_policy::kind::lfu));
  BOOST_TEST(parse_eviction("ttl:30")->ttl_seconds == 30u);
  BOOST_TEST(to_string(*parse_eviction("ttl:30")) == "ttl:30");
  for (const char* bad : {"", "LRU", "ttl:", "ttl:0", "ttl:-3", "ttl:1x", "fifo"})
    BOOST_TEST(!parse_eviction(bad), bad);
  BOOST_TEST(!check_table(table_spec{"w", 1, 0.0f, 10, "lfu", 3}));
  BOOST_TEST(
      is_error(check_table(table_spec{"w", 1, 0.0f, 10, "random", 1}), errc::bad_configuration));
  BOOST_TEST(
      is_error(check_table(table_spec{"w", 1, 0.0f, 10, "none", 0}), errc::bad_configuration));
  BOOST_TEST(
      is_error(check_table(table_spec{"w", 1, 0.0f, 10, "none", 256}), errc::bad_configuration));
  const auto back = spec_of(config_of(table_spec{"w", 3, 0.5f, 10, "ttl:9", 4}));
  BOOST_TEST(back.evict == "ttl:9");
  BOOST_TEST(back.admit_after == 4u);
}

BOOST_AUTO_TEST_CASE(lru_keeps_to_its_capacity_and_drops_the_least_recently_read) {
  auto t = one_bucket(table("lru", 100));
  BOOST_TEST_REQUIRE(succeeded(t.read(range(0, 100))));
  BOOST_TEST_REQUIRE(succeeded(t.read(range(0, 10))));  // 0..9 read again: recent
  BOOST_TEST_REQUIRE(succeeded(t.read(range(1000, 20))));
  BOOST_TEST(t.size() <= 100u);
  for (uint64_t id : range(0, 10)) BOOST_TEST(holds(t, id), id);
  for (uint64_t id : range(1000, 20)) BOOST_TEST(holds(t, id), id);  // what it just read stays
  const auto evicted = t.take_evicted();
  BOOST_TEST(evicted.size() == t.counters().rows_evicted);
  BOOST_TEST(evicted.size() >= 20u);
  for (uint64_t id : evicted) BOOST_TEST((id >= 10 && id < 100), id);  // the oldest went
  BOOST_TEST(t.take_evicted().empty());
  for (int round = 0; round < 50; ++round)  // a long run stays within the bound
    BOOST_TEST_REQUIRE(succeeded(t.read(range(2000 + round * 37, 37))));
  BOOST_TEST(t.size() <= 100u);
}

BOOST_AUTO_TEST_CASE(lfu_keeps_the_often_read_rows_through_a_flood_of_new_ones) {
  auto t = one_bucket(table("lfu", 200));
  const auto hot = range(0, 50);
  for (int i = 0; i < 5; ++i) BOOST_TEST_REQUIRE(succeeded(t.read(hot)));
  // The hot rows come back every third batch of a flood of ids read once: between, 200 new
  // ids (the capacity) are read, which would push them out of an lru table.
  for (uint64_t first = 1000, batch = 0; first < 11000; first += 100, ++batch) {
    BOOST_TEST_REQUIRE(succeeded(t.read(range(first, 100))));
    if (batch % 3 == 2) BOOST_TEST_REQUIRE(succeeded(t.read(hot)));
    BOOST_TEST(t.size() <= 200u);
  }
  for (uint64_t id : hot) BOOST_TEST(holds(t, id), id);
  BOOST_TEST(t.counters().rows_evicted >= 9800u);
  auto recent = one_bucket(table("lru", 200));  // the same reads under lru lose them
  for (int i = 0; i < 5; ++i) BOOST_TEST_REQUIRE(succeeded(recent.read(hot)));
  for (uint64_t first = 1000; first < 1300; first += 100)
    BOOST_TEST_REQUIRE(succeeded(recent.read(range(first, 100))));
  BOOST_TEST(!holds(recent, hot[0]));
}

BOOST_AUTO_TEST_CASE(ttl_expires_rows_not_read_for_its_seconds_on_the_primarys_clock) {
  auto t = one_bucket(table("ttl:60", 1000));
  uint32_t now = 5000;
  t.set_clock([&] { return now; });
  BOOST_TEST_REQUIRE(succeeded(t.read(range(0, 10))));
  now += 30;
  BOOST_TEST_REQUIRE(succeeded(t.read(range(5, 10))));  // 5..14 seen at 5030
  now += 45;                                            // 0..4 unread for 75 s, 5..14 for 45
  BOOST_TEST_REQUIRE(succeeded(t.read({100})));
  for (uint64_t id : range(0, 5)) BOOST_TEST(!holds(t, id), id);
  for (uint64_t id : range(5, 10)) BOOST_TEST(holds(t, id), id);
  BOOST_TEST(t.counters().rows_evicted == 5u);
}

BOOST_AUTO_TEST_CASE(an_id_gets_a_row_from_its_kth_sighting_and_its_gradients_are_dropped_before) {
  auto t = one_bucket(table("none", 1000, 3));
  for (int sighting = 1; sighting <= 2; ++sighting) {
    auto rows = t.read({42});
    BOOST_TEST_REQUIRE(succeeded(rows));
    BOOST_TEST(rows->values == initial(42), boost::test_tools::per_element());
    BOOST_TEST(t.size() == 0u);
    BOOST_TEST(!t.check(gradient({42}, 1.0f), 1e15f));
    t.apply(gradient({42}, 1.0f), 1.0f);
  }
  BOOST_TEST(t.counters().ids_not_admitted == 2u);
  BOOST_TEST(t.counters().grads_dropped == 2u);
  BOOST_TEST(t.read({42})->values == initial(42), boost::test_tools::per_element());
  BOOST_TEST(t.size() == 1u);  // the third sighting admits it
  t.apply(gradient({42}, 1.0f), 1.0f);
  BOOST_TEST(t.read({42})->values[0] == initial(42)[0] - 0.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(t.counters().grads_dropped == 2u);
  // An observer (evaluation) neither counts sightings nor creates rows.
  for (int i = 0; i < 5; ++i) BOOST_TEST_REQUIRE(succeeded(t.read({43}, row_reader::observer)));
  BOOST_TEST(t.size() == 1u);
  BOOST_TEST_REQUIRE(succeeded(t.read({43})));
  BOOST_TEST(t.size() == 1u);  // its first sighting
}

BOOST_AUTO_TEST_CASE(an_evicted_id_that_comes_back_starts_again_from_its_initial_value) {
  auto t = one_bucket(table("lru", 20));
  BOOST_TEST_REQUIRE(succeeded(t.read({3})));
  t.apply(gradient({3}, 1.0f), 1.0f);
  BOOST_TEST(t.read({3})->values != initial(3));
  BOOST_TEST_REQUIRE(succeeded(t.read(range(100, 40))));  // 3 is the least recent: gone
  BOOST_TEST(!holds(t, 3));
  t.apply(gradient({3}, 1.0f), 1.0f);  // a push of a row evicted since its read: dropped
  BOOST_TEST(t.counters().grads_dropped == 1u);
  BOOST_TEST(t.read({3})->values == initial(3), boost::test_tools::per_element());
}

// A backup sees its primary's reads (mirrored) and pushes in the same order, with the ids its
// primary evicted before each read: it holds the same rows with the same values and marks.
BOOST_AUTO_TEST_CASE(a_backup_that_mirrors_reads_and_evictions_holds_the_same_rows) {
  for (const char* policy : {"lru", "lfu"}) {
    auto primary = one_bucket(table(policy, 64, 2), optimizer_config{});
    auto backup = one_bucket(table(policy, 64, 2), optimizer_config{});
    uint64_t state = 11;
    for (int step = 0; step < 200; ++step) {
      std::vector<uint64_t> ids;
      for (int i = 0; i < 12; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        ids.push_back((state >> 33) % (step % 3 == 0 ? 40 : 400));
      }
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      auto read = primary.read(ids);
      BOOST_TEST_REQUIRE(succeeded(read));
      backup.evict(primary.take_evicted());
      auto mirrored = backup.read(ids, row_reader::mirror);
      BOOST_TEST_REQUIRE(succeeded(mirrored));
      BOOST_TEST(read->values == mirrored->values, boost::test_tools::per_element());
      const auto g = gradient(ids, 0.01f * float(step % 7) - 0.03f);
      primary.apply(g, 1.0f);
      backup.apply(g, 1.0f);
    }
    const auto mine = primary.save(1 << 20), theirs = backup.save(1 << 20);
    BOOST_TEST_REQUIRE(mine.size() == theirs.size());
    BOOST_TEST(mine[0].ids == theirs[0].ids, boost::test_tools::per_element());
    BOOST_TEST(mine[0].values == theirs[0].values, boost::test_tools::per_element());
    BOOST_TEST(mine[0].marks == theirs[0].marks, boost::test_tools::per_element());
    BOOST_TEST(primary.counters().rows_evicted == backup.counters().rows_evicted, policy);
    BOOST_TEST(primary.counters().rows_evicted > 0u, policy);
    BOOST_TEST(primary.counters().grads_dropped == backup.counters().grads_dropped, policy);
  }
}

// A bucket saved and restored (a checkpoint, a new backup's copy) goes on admitting and
// evicting exactly as the original does.
BOOST_AUTO_TEST_CASE(saved_eviction_and_admission_state_goes_on_deciding_the_same) {
  bucket_spec spec{0, 1, sgd(0.1f), {}, {}};
  spec.tables.push_back(table("lfu", 50, 2));
  spec.bucket_count = 1;
  spec.seed = 7;
  bucket_store original{spec};
  auto reads = [](uint64_t first) {
    return std::vector<row_request>{row_request{"emb", range(first % 90, 15)}};
  };
  for (uint64_t k = 0; k < 40; ++k)
    BOOST_TEST_REQUIRE(succeeded(original.read_rows(reads(k * 7), 0)));
  auto restored = bucket_store::restore(original.save());
  BOOST_TEST_REQUIRE(static_cast<bool>(restored));
  for (uint64_t k = 40; k < 80; ++k) {
    auto a = original.read_rows(reads(k * 7), 0);
    auto b = restored->read_rows(reads(k * 7), 0);
    BOOST_TEST_REQUIRE(succeeded(a));
    BOOST_TEST_REQUIRE(succeeded(b));
    BOOST_TEST(((*a)[0].values == (*b)[0].values));
  }
  const auto mine = original.stats().tables, theirs = restored->stats().tables;
  BOOST_TEST_REQUIRE(mine.size() == 1u);
  BOOST_TEST_REQUIRE(theirs.size() == 1u);
  BOOST_TEST(mine[0].rows == theirs[0].rows);
  BOOST_TEST(mine[0].rows_evicted == theirs[0].rows_evicted);
  BOOST_TEST(mine[0].ids_not_admitted == theirs[0].ids_not_admitted);
  BOOST_TEST(mine[0].ids_not_admitted > 0u);
  const auto saved_again = restored->save(), saved_first = original.save();
  BOOST_TEST_REQUIRE(saved_again.size() == saved_first.size());
  for (size_t i = 0; i < saved_first.size(); ++i)
    BOOST_TEST((saved_again[i].bytes == saved_first[i].bytes), "part " << i);
}

BOOST_AUTO_TEST_CASE(codec_carries_policies_evictions_and_table_counters) {
  bucket_spec spec{1, 2, sgd(0.1f), {}, {}};
  spec.tables.push_back(table("ttl:90", 500, 4));
  spec.bucket_count = 2;
  auto decoded = decode<bucket_spec>(encode(spec));
  BOOST_TEST_REQUIRE(succeeded(decoded));
  BOOST_TEST((decoded->tables[0].evict.type == eviction_policy::kind::ttl));
  BOOST_TEST(decoded->tables[0].evict.ttl_seconds == 90u);
  BOOST_TEST(decoded->tables[0].admit_after == 4u);
  pull_request mirror{1, 0, 3, {row_request{"emb", {5}}}, {row_request{"emb", {8, 9}}}};
  auto pull = decode<pull_request>(encode(mirror));
  BOOST_TEST_REQUIRE(succeeded(pull));
  BOOST_TEST_REQUIRE(pull->evicted.size() == 1u);
  BOOST_TEST(pull->evicted[0].ids == mirror.evicted[0].ids, boost::test_tools::per_element());
  bucket_stats stats;
  stats.tables.push_back(table_counters{"emb", 10, 3, 2, 1});
  auto back = decode<bucket_stats>(encode(stats));
  BOOST_TEST_REQUIRE(succeeded(back));
  BOOST_TEST_REQUIRE(back->tables.size() == 1u);
  BOOST_TEST(back->tables[0].rows_evicted == 3u);
  BOOST_TEST(back->tables[0].ids_not_admitted == 2u);
  BOOST_TEST(back->tables[0].grads_dropped == 1u);
}

// A bucket's counters per table, and a backup's store evicting what its primary did.
BOOST_AUTO_TEST_CASE(a_bucket_counts_per_table_and_a_backup_evicts_on_its_primarys_word) {
  bucket_spec spec{0, 1, sgd(0.1f), {}, {}};
  spec.tables.push_back(table("lru", 30));
  spec.bucket_count = 1;
  bucket_store primary{spec}, backup{spec};
  for (uint64_t first = 0; first < 200; first += 10) {
    const std::vector<row_request> read{row_request{"emb", range(first, 10)}};
    BOOST_TEST_REQUIRE(succeeded(primary.read_rows(read, 0)));
    BOOST_TEST(!backup.evict_rows(primary.take_evictions()));
    BOOST_TEST_REQUIRE(succeeded(backup.read_rows(read, 0, /*mirrored=*/true)));
  }
  const auto mine = primary.stats().tables[0], theirs = backup.stats().tables[0];
  BOOST_TEST(mine.rows <= 30u);
  BOOST_TEST(mine.rows == theirs.rows);
  BOOST_TEST(mine.rows_evicted == theirs.rows_evicted);
  BOOST_TEST(mine.rows_evicted == 200u - mine.rows);
  BOOST_TEST(is_error(backup.evict_rows({row_request{"nope", {1}}}), errc::shape_mismatch));
}
