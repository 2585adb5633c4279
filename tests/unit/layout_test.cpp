// Unit tests of the parameter layout (troupe/layout.hpp): flat offsets, bucket plans that cover
// every value exactly once and are balanced, round-robin server placement, gather/scatter, and
// the matches() check a server applies to incoming tensors.
#define BOOST_TEST_MODULE layout
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <numeric>

#include "troupe/detail/layout.hpp"

using troupe::bucket_placement;
using troupe::dense_tensor;
using troupe::flat_layout;
using troupe::placement;
using troupe::tensor_spec;

namespace {

// The parameters of the Fashion-MNIST MLP: 784 -> 256 -> 128 -> 10.
std::vector<tensor_spec> mlp() {
  return {{"fc1.w", {256, 784}}, {"fc1.b", {256}},     {"fc2.w", {128, 256}},
          {"fc2.b", {128}},      {"fc3.w", {10, 128}}, {"fc3.b", {10}}};
}

uint64_t bucket_load(const bucket_placement& b) {
  uint64_t n = 0;
  for (const auto& s : b.slices) n += troupe::numel(s.shape);
  return n;
}

// How many buckets hold each value of the flat vector; every entry must be exactly 1.
std::vector<int> coverage(const flat_layout& layout, const placement& plan) {
  std::vector<int> seen(layout.total, 0);
  for (const auto& b : plan.buckets)
    for (const auto& s : b.slices) {
      const auto r = troupe::locate(layout, s);
      BOOST_TEST_REQUIRE(r.has_value(), s.tensor);
      BOOST_TEST_REQUIRE(r->offset + r->count <= layout.total, s.tensor);
      for (uint64_t i = r->offset; i < r->offset + r->count; ++i) ++seen[i];
    }
  return seen;
}

// Every slice is a row range of its tensor: same trailing dimensions, rows inside the tensor.
void check_slices_fit(const flat_layout& layout, const placement& plan) {
  for (const auto& b : plan.buckets)
    for (const auto& s : b.slices) {
      const int t = layout.find(s.tensor);
      BOOST_TEST_REQUIRE(t >= 0, s.tensor);
      const auto& full = layout.specs[t].shape;
      BOOST_TEST_REQUIRE(s.shape.size() == full.size(), s.tensor);
      if (full.empty()) continue;
      BOOST_TEST(s.row_offset + s.shape[0] <= full[0], s.tensor);
      BOOST_TEST(std::equal(s.shape.begin() + 1, s.shape.end(), full.begin() + 1), s.tensor);
    }
}

std::vector<float> iota_values(uint64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

}  // namespace

// -- flat_layout --------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(flat_layout_offsets_are_prefix_sums) {
  flat_layout layout{mlp()};
  const std::vector<uint64_t> expected = {0, 200704, 200960, 233728, 233856, 235136};
  BOOST_TEST(layout.offsets == expected, boost::test_tools::per_element());
  BOOST_TEST(layout.total == 235146u);
}

BOOST_AUTO_TEST_CASE(flat_layout_of_nothing_is_empty) {
  flat_layout layout{{}};
  BOOST_TEST(layout.total == 0u);
  BOOST_TEST(layout.offsets.empty());
}

BOOST_AUTO_TEST_CASE(flat_layout_scalar_counts_one) {
  flat_layout layout{{{"a", {2, 3}}, {"s", {}}, {"b", {4}}}};
  const std::vector<uint64_t> expected = {0, 6, 7};
  BOOST_TEST(layout.offsets == expected, boost::test_tools::per_element());
  BOOST_TEST(layout.total == 11u);
}

BOOST_AUTO_TEST_CASE(flat_layout_find) {
  flat_layout layout{mlp()};
  BOOST_TEST(layout.find("fc1.w") == 0);
  BOOST_TEST(layout.find("fc3.b") == 5);
  BOOST_TEST(layout.find("fc4.w") == -1);
  BOOST_TEST(layout.find("") == -1);
}

BOOST_AUTO_TEST_CASE(row_size_of_shapes) {
  BOOST_TEST(troupe::row_size({256, 784}) == 784u);
  BOOST_TEST(troupe::row_size({256}) == 1u);
  BOOST_TEST(troupe::row_size({}) == 1u);
  BOOST_TEST(troupe::row_size({2, 3, 4}) == 12u);
}

BOOST_AUTO_TEST_CASE(locate_slice_in_flat_vector) {
  flat_layout layout{mlp()};
  const auto r = troupe::locate(layout, {"fc2.w", 10, {5, 256}});
  BOOST_TEST_REQUIRE(r.has_value());
  BOOST_TEST(r->offset == 200960u + 10u * 256u);
  BOOST_TEST(r->count == 5u * 256u);
}

BOOST_AUTO_TEST_CASE(locate_rejects_what_is_not_a_row_range) {
  flat_layout layout{mlp()};
  BOOST_TEST(!troupe::locate(layout, {"nope", 0, {3}}));
  BOOST_TEST(!troupe::locate(layout, {"fc3.b", 257, {256}}));   // rows past the end
  BOOST_TEST(!troupe::locate(layout, {"fc3.b", 5, {6}}));       // 5 + 6 > 10 rows
  BOOST_TEST(!troupe::locate(layout, {"fc2.w", 0, {5, 255}}));  // other trailing dimension
  BOOST_TEST(!troupe::locate(layout, {"fc2.w", 0, {5}}));       // other rank
  BOOST_TEST(troupe::locate(layout, {"fc3.b", 4, {6}}).has_value());
}

BOOST_AUTO_TEST_CASE(validate_plan_accepts_our_plans_and_rejects_foreign_slices) {
  flat_layout layout{mlp()};
  placement plan = troupe::plan_buckets(layout, 4, 2);
  BOOST_TEST(!troupe::validate_plan(layout, plan));
  placement renumbered = plan;
  renumbered.buckets[1].bucket = 3;
  BOOST_TEST(static_cast<bool>(troupe::validate_plan(layout, renumbered)));
  plan.buckets[0].slices.push_back({"fc3.b", 257, {256}});
  BOOST_TEST(static_cast<bool>(troupe::validate_plan(layout, plan)));
}

BOOST_AUTO_TEST_CASE(gather_and_scatter_ignore_slices_outside_the_model) {
  flat_layout layout{mlp()};
  std::vector<float> flat(layout.total, 1.0f);
  const bucket_placement hostile{0, 0, {{"fc3.b", 8, {4}}}};  // rows 8..11 of 10
  const auto out = troupe::gather(layout, hostile, flat);
  BOOST_TEST_REQUIRE(out.size() == 1u);
  BOOST_TEST(out[0].values.empty());
  troupe::scatter(layout, {dense_tensor{"fc3.b", {4}, 8, {9, 9, 9, 9}}}, flat);
  BOOST_TEST(std::count(flat.begin(), flat.end(), 9.0f) == 0);
}

// -- plan_buckets -------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(plan_covers_every_value_once) {
  flat_layout layout{mlp()};
  for (uint32_t k : {1u, 2u, 3u, 4u, 7u, 16u, 1000u}) {
    const placement plan = troupe::plan_buckets(layout, k, 2);
    BOOST_TEST(plan.buckets.size() == k);
    const auto seen = coverage(layout, plan);
    BOOST_TEST(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }), "K=" << k);
    check_slices_fit(layout, plan);
  }
}

BOOST_AUTO_TEST_CASE(plan_is_balanced_for_the_mlp) {
  flat_layout layout{mlp()};
  const placement plan = troupe::plan_buckets(layout, 4, 2);
  BOOST_TEST_REQUIRE(plan.buckets.size() == 4u);
  uint64_t max = 0, sum = 0;
  for (const auto& b : plan.buckets) {
    max = std::max(max, bucket_load(b));
    sum += bucket_load(b);
  }
  BOOST_TEST(sum == layout.total);
  BOOST_TEST(max * 4 <= 2 * sum, "max load " << max << ", mean " << sum / 4.0);
}

BOOST_AUTO_TEST_CASE(plan_has_no_empty_bucket_for_the_mlp) {
  flat_layout layout{mlp()};
  for (uint32_t k : {2u, 4u, 8u}) {
    const placement plan = troupe::plan_buckets(layout, k, 2);
    for (const auto& b : plan.buckets) BOOST_TEST(bucket_load(b) > 0u, "K=" << k);
  }
}

BOOST_AUTO_TEST_CASE(plan_numbers_buckets_and_places_them_round_robin) {
  flat_layout layout{mlp()};
  const placement plan = troupe::plan_buckets(layout, 7, 3);
  BOOST_TEST_REQUIRE(plan.buckets.size() == 7u);
  for (uint32_t b = 0; b < 7; ++b) {
    BOOST_TEST(plan.buckets[b].bucket == b);
    BOOST_TEST(plan.buckets[b].server == b % 3);
  }
}

BOOST_AUTO_TEST_CASE(plan_with_one_bucket_holds_every_tensor_whole) {
  flat_layout layout{mlp()};
  const placement plan = troupe::plan_buckets(layout, 1, 4);
  BOOST_TEST_REQUIRE(plan.buckets.size() == 1u);
  const auto& b = plan.buckets[0];
  BOOST_TEST(b.server == 0u);
  BOOST_TEST(b.slices.size() == layout.specs.size());
  for (const auto& s : b.slices) {
    const int t = layout.find(s.tensor);
    BOOST_TEST_REQUIRE(t >= 0);
    BOOST_TEST(s.row_offset == 0u);
    BOOST_TEST(s.shape == layout.specs[t].shape, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(plan_with_more_buckets_than_rows) {
  flat_layout layout{{{"w", {3, 4}}}};
  const placement plan = troupe::plan_buckets(layout, 8, 2);
  BOOST_TEST_REQUIRE(plan.buckets.size() == 8u);
  const auto seen = coverage(layout, plan);
  BOOST_TEST(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  check_slices_fit(layout, plan);
  size_t used = 0;
  for (const auto& b : plan.buckets) used += !b.slices.empty();
  BOOST_TEST(used == 3u);  // one row each: rows are never split
}

BOOST_AUTO_TEST_CASE(plan_zero_buckets_and_servers_mean_one) {
  flat_layout layout{mlp()};
  const placement plan = troupe::plan_buckets(layout, 0, 0);
  BOOST_TEST_REQUIRE(plan.buckets.size() == 1u);
  BOOST_TEST(plan.buckets[0].server == 0u);
  BOOST_TEST(bucket_load(plan.buckets[0]) == layout.total);
}

BOOST_AUTO_TEST_CASE(plan_keeps_scalars_and_empty_tensors) {
  flat_layout layout{{{"s", {}}, {"e", {0, 5}}, {"v", {9}}}};
  const placement plan = troupe::plan_buckets(layout, 3, 1);
  const auto seen = coverage(layout, plan);
  BOOST_TEST(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  std::vector<std::string> names;
  for (const auto& b : plan.buckets)
    for (const auto& s : b.slices) names.push_back(s.tensor);
  BOOST_TEST(std::count(names.begin(), names.end(), "s") == 1);
  BOOST_TEST(std::count(names.begin(), names.end(), "e") == 1);
}

// -- gather, scatter, matches -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(gather_copies_slice_values) {
  flat_layout layout{mlp()};
  const auto flat = iota_values(layout.total);
  const bucket_placement b{0, 0, {{"fc3.w", 2, {3, 128}}, {"fc3.b", 0, {10}}}};
  const auto tensors = troupe::gather(layout, b, flat);
  BOOST_TEST_REQUIRE(tensors.size() == 2u);
  BOOST_TEST(tensors[0].name == "fc3.w");
  BOOST_TEST(tensors[0].row_offset == 2u);
  BOOST_TEST_REQUIRE(tensors[0].values.size() == 384u);
  BOOST_TEST(tensors[0].values.front() == flat[233856 + 256]);
  BOOST_TEST(tensors[0].values.back() == flat[233856 + 256 + 383]);
  BOOST_TEST(tensors[1].values == std::vector<float>(flat.end() - 10, flat.end()),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(gather_scatter_round_trip) {
  flat_layout layout{mlp()};
  const auto flat = iota_values(layout.total);
  const placement plan = troupe::plan_buckets(layout, 4, 2);
  std::vector<float> back(layout.total, 0.0f);
  for (const auto& b : plan.buckets) troupe::scatter(layout, troupe::gather(layout, b, flat), back);
  BOOST_TEST(back == flat, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(scatter_skips_tensor_with_wrong_value_count) {
  flat_layout layout{{{"w", {2, 2}}}};
  std::vector<float> flat(4, 0.0f);
  troupe::scatter(layout, {dense_tensor{"w", {1, 2}, 0, {1.0f, 2.0f, 3.0f}}}, flat);
  BOOST_TEST(flat == std::vector<float>(4, 0.0f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(scatter_skips_unknown_tensor) {
  flat_layout layout{{{"w", {2, 2}}}};
  std::vector<float> flat(4, 0.0f);
  troupe::scatter(layout, {dense_tensor{"x", {1, 2}, 0, {1.0f, 2.0f}}}, flat);
  BOOST_TEST(flat == std::vector<float>(4, 0.0f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(scatter_writes_only_its_rows) {
  flat_layout layout{{{"w", {3, 2}}}};
  std::vector<float> flat(6, 0.0f);
  troupe::scatter(layout, {dense_tensor{"w", {1, 2}, 1, {7.0f, 8.0f}}}, flat);
  const std::vector<float> expected = {0, 0, 7, 8, 0, 0};
  BOOST_TEST(flat == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(matches_gathered_tensors) {
  flat_layout layout{mlp()};
  const auto flat = iota_values(layout.total);
  const placement plan = troupe::plan_buckets(layout, 4, 2);
  for (const auto& b : plan.buckets)
    BOOST_TEST(troupe::matches(b, troupe::gather(layout, b, flat)));
}

BOOST_AUTO_TEST_CASE(matches_empty_bucket_and_no_tensors) {
  BOOST_TEST(troupe::matches(bucket_placement{}, {}));
}

BOOST_AUTO_TEST_CASE(matches_rejects_differences) {
  const bucket_placement b{0, 0, {{"w", 2, {2, 3}}}};
  const dense_tensor good{"w", {2, 3}, 2, std::vector<float>(6, 1.0f)};
  BOOST_TEST_REQUIRE(troupe::matches(b, {good}));

  auto other_name = good;
  other_name.name = "v";
  auto other_offset = good;
  other_offset.row_offset = 0;
  auto other_shape = good;
  other_shape.shape = {3, 2};
  auto short_values = good;
  short_values.values.pop_back();
  BOOST_TEST(!troupe::matches(b, {other_name}));
  BOOST_TEST(!troupe::matches(b, {other_offset}));
  BOOST_TEST(!troupe::matches(b, {other_shape}));
  BOOST_TEST(!troupe::matches(b, {short_values}));
  BOOST_TEST(!troupe::matches(b, {}));
  BOOST_TEST(!troupe::matches(b, {good, good}));
}

BOOST_AUTO_TEST_CASE(matches_requires_the_plan_order) {
  const bucket_placement b{0, 0, {{"a", 0, {1}}, {"b", 0, {1}}}};
  BOOST_TEST(troupe::matches(b, {{"a", {1}, 0, {1.0f}}, {"b", {1}, 0, {2.0f}}}));
  BOOST_TEST(!troupe::matches(b, {{"b", {1}, 0, {2.0f}}, {"a", {1}, 0, {1.0f}}}));
}

BOOST_AUTO_TEST_CASE(within_accepts_row_ranges_of_the_slices_only) {
  const bucket_placement b{0, 0, {{"fc1.w", 10, {20, 784}}, {"fc3.b", 0, {10}}}};
  using troupe::within;
  BOOST_TEST(within(b, {}));
  BOOST_TEST(within(b, {dense_tensor{"fc1.w", {2, 784}, 15, std::vector<float>(2 * 784)}}));
  BOOST_TEST(within(b, {dense_tensor{"fc3.b", {3}, 7, std::vector<float>(3)}}));
  BOOST_TEST(!within(b, {dense_tensor{"fc1.w", {2, 784}, 29, std::vector<float>(2 * 784)}}));
  BOOST_TEST(!within(b, {dense_tensor{"fc1.w", {2, 784}, 9, std::vector<float>(2 * 784)}}));
  BOOST_TEST(!within(b, {dense_tensor{"fc1.w", {2, 783}, 12, std::vector<float>(2 * 783)}}));
  BOOST_TEST(!within(b, {dense_tensor{"fc3.b", {3}, 8, std::vector<float>(3)}}));
  BOOST_TEST(!within(b, {dense_tensor{"fc3.b", {3}, 0, std::vector<float>(2)}}));
  BOOST_TEST(!within(b, {dense_tensor{"fc2.w", {1, 256}, 0, std::vector<float>(256)}}));
}

BOOST_AUTO_TEST_CASE(a_tensor_whose_rows_outgrow_a_message_is_cut_inside_its_rows) {
  // Rows of 3 Mi values (12 MiB each, a bucket of two would pass the 16 MiB cap): flat pieces of
  // at most 1 Mi values, every value in one bucket, each bucket under 2 Mi values plus a row of
  // the small tensor; gather and scatter give back every value.
  flat_layout layout{{{"wide", {3, 3u << 20}}, {"b", {3}}}};
  const auto plan = troupe::plan_buckets(layout, troupe::fewest_parts(layout.total), 1);
  const auto seen = coverage(layout, plan);
  BOOST_TEST(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  for (const auto& b : plan.buckets) {
    BOOST_TEST(bucket_load(b) <= 2 * troupe::part_values + 3);
    for (const auto& s : b.slices)
      if (s.tensor == "wide") BOOST_TEST(s.shape.size() == 1u);  // a flat piece
  }
  const auto flat = iota_values(layout.total);
  std::vector<float> back(layout.total, 0.0f);
  for (const auto& b : plan.buckets) troupe::scatter(layout, troupe::gather(layout, b, flat), back);
  BOOST_TEST((back == flat));
  BOOST_TEST_REQUIRE(!troupe::validate_plan(layout, plan));
  // A flat piece past the tensor's end, or a row range of it, is not the model's.
  BOOST_TEST(!troupe::locate(layout, {"wide", (9u << 20) - 1, {2}}));
  BOOST_TEST(!troupe::locate(layout, {"wide", 0, {1, 3u << 20}}));
}
