// Embedding tables: row ownership and deterministic init, a bucket's share of a table (lazy
// rows, per-row optimizer state, clipping, capacity, bad pushes), a bucket serving rows in
// pulls and applying row gradients (also in bsp rounds), the worker's per-chunk row helpers,
// and the codec of the new message fields.
#define BOOST_TEST_MODULE sparse
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <set>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/sparse_table.hpp"
#include "actors/worker/chunk_rows.hpp"
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

// The ids among 0..n-1 that bucket `bucket` of `buckets` owns in table `table`.
std::vector<uint64_t> owned(const std::string& table, uint32_t bucket, uint32_t buckets,
                            size_t want) {
  std::vector<uint64_t> out;
  for (uint64_t id = 0; out.size() < want; ++id)
    if (row_bucket(table, id, buckets) == bucket) out.push_back(id);
  return out;
}

bucket_spec spec_with_table(uint32_t bucket, uint32_t buckets, consistency_config c = {},
                            uint32_t workers = 2) {
  bucket_spec spec{bucket, workers, sgd(0.5f), {}, c};
  spec.tables.push_back(table_config{"emb", 2, 0.1f, 1000});
  spec.bucket_count = buckets;
  spec.seed = 9;
  return spec;
}

}  // namespace

BOOST_AUTO_TEST_CASE(rows_are_spread_over_buckets_and_initialised_the_same_everywhere) {
  std::vector<int> per_bucket(4, 0);
  for (uint64_t id = 0; id < 4000; ++id) ++per_bucket[row_bucket("emb", id, 4)];
  for (int n : per_bucket) BOOST_TEST((n > 800 && n < 1200));
  BOOST_TEST(row_bucket("emb", 77, 4) == row_bucket("emb", 77, 4));
  std::vector<float> a(8), b(8), c(8);
  init_row(1, "emb", 5, 0.5f, a);
  init_row(1, "emb", 5, 0.5f, b);
  init_row(1, "emb", 6, 0.5f, c);
  BOOST_TEST(a == b, boost::test_tools::per_element());
  BOOST_TEST(a != c);
  for (float x : a) BOOST_TEST((x >= -0.5f && x <= 0.5f));
}

BOOST_AUTO_TEST_CASE(a_table_creates_rows_on_first_read_and_keeps_them) {
  sparse_table t{table_config{"emb", 2, 0.1f, 1000}, 1, 3, 9, sgd(0.5f), 0.0f};
  const auto ids = owned("emb", 1, 3, 3);
  auto first = t.read(ids);
  BOOST_TEST_REQUIRE(succeeded(first));
  BOOST_TEST(t.size() == 3u);
  BOOST_TEST(first->values.size() == 6u);
  std::vector<float> expected(2);
  init_row(9, "emb", ids[1], 0.1f, expected);
  BOOST_TEST(first->values[2] == expected[0]);
  BOOST_TEST(first->values[3] == expected[1]);
  auto again = t.read(ids);
  BOOST_TEST(again->values == first->values, boost::test_tools::per_element());
  BOOST_TEST(t.size() == 3u);
}

BOOST_AUTO_TEST_CASE(a_table_refuses_rows_it_does_not_own_or_has_no_room_for) {
  sparse_table t{table_config{"emb", 1, 0.0f, 8}, 0, 1, 1, sgd(0.1f), 0.0f};
  BOOST_TEST(succeeded(t.read({0, 1, 2})));  // with one bucket, it owns every row
  sparse_table shard{table_config{"emb", 1, 0.0f, 8}, 0, 2, 1, sgd(0.1f), 0.0f};
  const auto foreign = owned("emb", 1, 2, 1);
  BOOST_TEST(fails_with(shard.read(foreign), errc::unknown_bucket));
  std::vector<uint64_t> many;
  for (uint64_t id = 0; many.size() < 3000; ++id) many.push_back(id);
  BOOST_TEST(fails_with(t.read(many), errc::message_too_large));  // capacity 8 (+ slack)
  BOOST_TEST(t.size() == 3u);                                     // a refused read creates nothing
}

BOOST_AUTO_TEST_CASE(row_gradients_are_checked_then_applied_with_clipping) {
  sparse_table t{table_config{"emb", 2, 0.0f, 100}, 0, 1, 1, sgd(0.5f), 1.0f};
  BOOST_TEST_REQUIRE(succeeded(t.read({4})));
  const sparse_rows grads{"emb", 2, {4, 7}, {3.0f, 4.0f, 0.1f, 0.0f}};
  BOOST_TEST(!t.check(grads, 1e15f));
  t.apply(grads, 1.0f);
  auto rows = t.read({4, 7});
  BOOST_TEST_REQUIRE(succeeded(rows));
  // Row 4's gradient (3, 4) has norm 5 and is clipped to norm 1: (0.6, 0.8).
  BOOST_TEST(rows->values[0] == -0.5f * 0.6f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(rows->values[1] == -0.5f * 0.8f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(rows->values[2] == -0.05f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(is_error(t.check(sparse_rows{"emb", 3, {4}, {1, 2, 3}}, 1e15f), errc::shape_mismatch));
  BOOST_TEST(is_error(t.check(sparse_rows{"emb", 2, {4, 4}, {1, 2, 3, 4}}, 1e15f),
                      errc::malformed_message));
  BOOST_TEST(is_error(t.check(sparse_rows{"emb", 2, {4}, {NAN, 0}}, 1e15f), errc::non_finite));
  BOOST_TEST(is_error(t.check(sparse_rows{"emb", 2, {4}, {1e20f, 0}}, 1e15f), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(a_bucket_serves_rows_and_applies_row_gradients) {
  bucket_store store{spec_with_table(0, 2)};
  const auto ids = owned("emb", 0, 2, 2);
  auto rows = store.read_rows({row_request{"emb", ids}});
  BOOST_TEST_REQUIRE(succeeded(rows));
  BOOST_TEST_REQUIRE(rows->size() == 1u);
  const auto before = (*rows)[0].values;
  push_request push{0, 1, 0, vector_clock{2}};
  push.sparse.push_back(sparse_rows{"emb", 2, {ids[1]}, {1.0f, -2.0f}});
  BOOST_TEST_REQUIRE(succeeded(store.apply(push)));
  auto after = store.read_rows({row_request{"emb", ids}});
  BOOST_TEST((*after)[0].values[0] == before[0]);  // row ids[0] untouched
  BOOST_TEST((*after)[0].values[2] == before[2] - 0.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST((*after)[0].values[3] == before[3] + 1.0f, boost::test_tools::tolerance(1e-6f));
  // Rows of another bucket, an unknown table: refused, counted, nothing changes.
  push_request foreign{0, 1, 0, vector_clock{2}};
  foreign.sparse.push_back(sparse_rows{"emb", 2, owned("emb", 1, 2, 1), {1.0f, 1.0f}});
  BOOST_TEST(fails_with(store.apply(foreign), errc::unknown_bucket));
  push_request unknown{0, 1, 0, vector_clock{2}};
  unknown.sparse.push_back(sparse_rows{"nope", 2, {ids[0]}, {1.0f, 1.0f}});
  BOOST_TEST(fails_with(store.apply(unknown), errc::shape_mismatch));
  BOOST_TEST(store.stats().updates_rejected == 2u);
  BOOST_TEST(fails_with(store.read_rows({row_request{"nope", {1}}}), errc::shape_mismatch));
}

BOOST_AUTO_TEST_CASE(bsp_averages_row_gradients_over_the_round) {
  bucket_store store{spec_with_table(0, 1, {consistency_config::mode::bsp, 0})};
  auto start = store.read_rows({row_request{"emb", {3}}});
  BOOST_TEST_REQUIRE(succeeded(start));
  for (uint32_t w = 0; w < 2; ++w) {
    push_request push{0, w, 0, vector_clock{2}};
    push.sparse.push_back(sparse_rows{"emb", 2, {3}, {w == 0 ? 1.0f : 3.0f, 0.0f}});
    BOOST_TEST_REQUIRE(succeeded(store.apply(push)));
  }
  auto after = store.read_rows({row_request{"emb", {3}}});
  BOOST_TEST((*after)[0].values[0] == (*start)[0].values[0] - 0.5f * 2.0f,
             boost::test_tools::tolerance(1e-6f));
}

// A replica that reads fixed rows per batch, for the chunk helpers.
struct rows_replica : task_replica {
  caf::expected<float> gradient(std::span<const float>, uint32_t, uint64_t,
                                std::span<float>) override {
    return 0.0f;
  }
  std::vector<std::vector<uint64_t>> rows_of(uint32_t, uint64_t batch) override {
    return {{batch + 10, 5}, {batch}};
  }
};

BOOST_AUTO_TEST_CASE(chunk_rows_are_collected_split_filled_and_cut_by_bucket) {
  rows_replica replica;
  const std::vector<table_spec> tables = {{"a", 2}, {"b", 1}};
  sparse_rows_view rows;
  prepare_chunk_rows(replica, tables, work_chunk{0, 0, 3}, rows);
  BOOST_TEST(rows.ids[0] == (std::vector<uint64_t>{5, 10, 11, 12}),
             boost::test_tools::per_element());
  BOOST_TEST(rows.ids[1] == (std::vector<uint64_t>{0, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(rows.values[0].size() == 8u);
  // Every row goes to exactly one of 3 buckets.
  std::multiset<uint64_t> asked;
  for (uint32_t b = 0; b < 3; ++b)
    for (const auto& r : row_requests(tables, rows, b, 3))
      if (r.table == "a") asked.insert(r.ids.begin(), r.ids.end());
  BOOST_TEST(asked.size() == 4u);
  BOOST_TEST(std::set<uint64_t>(asked.begin(), asked.end()).size() == 4u);
  // Filling from a reply; a row nobody asked for is refused.
  BOOST_TEST(!fill_rows(tables, {sparse_rows{"a", 2, {11}, {7.0f, 8.0f}}}, rows));
  BOOST_TEST(rows.values[0][4] == 7.0f);
  BOOST_TEST(rows.values[0][5] == 8.0f);
  BOOST_TEST(
      is_error(fill_rows(tables, {sparse_rows{"a", 2, {99}, {1, 2}}}, rows), errc::shape_mismatch));
  BOOST_TEST(
      is_error(fill_rows(tables, {sparse_rows{"a", 1, {11}, {1}}}, rows), errc::shape_mismatch));
  // Gradients cut back by bucket cover every row once.
  rows.grads[0][2] = 1.5f;  // row 10
  size_t cut = 0;
  for (uint32_t b = 0; b < 3; ++b)
    for (const auto& g : row_gradients(tables, rows, b, 3)) {
      cut += g.ids.size();
      for (size_t i = 0; i < g.ids.size(); ++i)
        if (g.name == "a" && g.ids[i] == 10) BOOST_TEST(g.values[2 * i] == 1.5f);
    }
  BOOST_TEST(cut == 7u);
}

BOOST_AUTO_TEST_CASE(codec_carries_row_requests_rows_and_tables) {
  pull_request pull{2, 1, 5, {row_request{"emb", {1, 2, 3}}}};
  auto p = decode<pull_request>(encode(pull));
  BOOST_TEST_REQUIRE(succeeded(p));
  BOOST_TEST_REQUIRE(p->rows.size() == 1u);
  BOOST_TEST(p->rows[0].ids == pull.rows[0].ids, boost::test_tools::per_element());
  pull_reply reply{2, 1, vector_clock{1}, {}, {sparse_rows{"emb", 2, {4}, {0.5f, -0.5f}}}};
  auto r = decode<pull_reply>(encode(reply));
  BOOST_TEST_REQUIRE(succeeded(r));
  BOOST_TEST_REQUIRE(r->rows.size() == 1u);
  BOOST_TEST(r->rows[0].values == reply.rows[0].values, boost::test_tools::per_element());
  auto spec = decode<bucket_spec>(encode(spec_with_table(1, 4)));
  BOOST_TEST_REQUIRE(succeeded(spec));
  BOOST_TEST_REQUIRE(spec->tables.size() == 1u);
  BOOST_TEST(spec->tables[0].name == "emb");
  BOOST_TEST(spec->tables[0].row_dim == 2u);
  BOOST_TEST(spec->bucket_count == 4u);
  BOOST_TEST(spec->seed == 9u);
  auto bad = spec_with_table(4, 4);  // bucket 4 of 4 does not exist
  BOOST_TEST(fails_with(decode<bucket_spec>(encode(bad)), errc::malformed_message));
}

// Saved state of a bucket with an embedding table: rows with their Adam moments and step
// counts, and a bsp round's summed row gradients, come back exactly.
BOOST_AUTO_TEST_CASE(saved_rows_restore_with_their_optimizer_state_and_round_sums) {
  auto spec = spec_with_table(1, 3, {consistency_config::mode::bsp, 0});
  spec.optimizer = optimizer_config{};  // adam: rows carry m, v and a step count
  bucket_store original{spec};
  const auto ids = owned("emb", 1, 3, 5);
  auto push_rows = [&](uint32_t worker, uint64_t clock, float g, std::vector<uint64_t> rows) {
    push_request push{1, worker, clock, vector_clock{2}};
    push.sparse.push_back(sparse_rows{"emb", 2, rows, std::vector<float>(rows.size() * 2, g)});
    return push;
  };
  BOOST_TEST_REQUIRE(succeeded(original.read_rows({row_request{"emb", ids}})));
  BOOST_TEST_REQUIRE(succeeded(original.apply(push_rows(0, 0, 0.3f, ids))));
  BOOST_TEST_REQUIRE(succeeded(original.apply(push_rows(1, 0, -0.1f, ids))));  // round done
  BOOST_TEST_REQUIRE(succeeded(original.apply(push_rows(0, 1, 0.2f, {ids[0], ids[2]}))));
  auto restored = bucket_store::restore(original.save());
  BOOST_TEST_REQUIRE(static_cast<bool>(restored));
  // Worker 1 completes the half-done round on both; then every row reads the same.
  const auto finish = push_rows(1, 1, 0.4f, {ids[1], ids[2]});
  BOOST_TEST_REQUIRE(succeeded(original.apply(finish)));
  BOOST_TEST_REQUIRE(succeeded(restored->apply(finish)));
  auto mine = original.read_rows({row_request{"emb", ids}});
  auto theirs = restored->read_rows({row_request{"emb", ids}});
  BOOST_TEST_REQUIRE(succeeded(mine));
  BOOST_TEST_REQUIRE(succeeded(theirs));
  BOOST_TEST((*mine)[0].values == (*theirs)[0].values, boost::test_tools::per_element());
  const auto saved_again = restored->save(), saved_first = original.save();
  BOOST_TEST_REQUIRE(saved_again.size() == saved_first.size());
  for (size_t i = 0; i < saved_first.size(); ++i)
    BOOST_TEST((saved_again[i].bytes == saved_first[i].bytes), "part " << i);
}

BOOST_AUTO_TEST_CASE(delay_compensation_corrects_a_stale_row_gradient_as_the_formula_says) {
  // Worker 0 reads a row, worker 1 moves it, worker 0 pushes: with --dc linear:L its gradient
  // g becomes g + L (theta_now - theta_read) before the step; dcasgd: g + L g*g (now - read).
  for (auto kind : {compensation_config::kind::linear, compensation_config::kind::dcasgd}) {
    auto spec = spec_with_table(0, 1);
    spec.compensation = compensation_config{kind, 0.5f};
    bucket_store store{spec};
    const uint64_t id = 3;
    auto read = store.read_rows({row_request{"emb", {id}}}, 0);
    BOOST_TEST_REQUIRE(succeeded(read));
    const auto theta_read = (*read)[0].values;
    (void)store.read_rows({row_request{"emb", {id}}}, 1);
    push_request other{0, 1, 1, vector_clock{2}};
    other.sparse.push_back(sparse_rows{"emb", 2, {id}, {2.0f, -4.0f}});
    BOOST_TEST_REQUIRE(succeeded(store.apply(other)));
    const auto theta_now = (*store.read_rows({row_request{"emb", {id}}}))[0].values;
    push_request stale{0, 0, 1, vector_clock{2}};
    const std::vector<float> g{1.0f, 3.0f};
    stale.sparse.push_back(sparse_rows{"emb", 2, {id}, g});
    BOOST_TEST_REQUIRE(succeeded(store.apply(stale)));
    const auto after = (*store.read_rows({row_request{"emb", {id}}}))[0].values;
    for (size_t c = 0; c < 2; ++c) {
      const float hessian = kind == compensation_config::kind::linear ? 1.0f : g[c] * g[c];
      const float corrected = g[c] + 0.5f * hessian * (theta_now[c] - theta_read[c]);
      BOOST_TEST(after[c] == theta_now[c] - 0.5f * corrected,  // sgd, lr 0.5
                 boost::test_tools::tolerance(1e-5f));
    }
  }
  // Without compensation the same stale push is applied as it is.
  bucket_store plain{spec_with_table(0, 1)};
  (void)plain.read_rows({row_request{"emb", {3}}}, 0);
  const auto before = (*plain.read_rows({row_request{"emb", {3}}}))[0].values;
  push_request push{0, 0, 1, vector_clock{2}};
  push.sparse.push_back(sparse_rows{"emb", 2, {3}, {1.0f, 3.0f}});
  BOOST_TEST_REQUIRE(succeeded(plain.apply(push)));
  const auto after = (*plain.read_rows({row_request{"emb", {3}}}))[0].values;
  BOOST_TEST(after[0] == before[0] - 0.5f, boost::test_tools::tolerance(1e-6f));
}
