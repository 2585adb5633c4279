// The arithmetic of data-parallel steps: every example of an epoch goes to exactly one member
// whatever the member count, buckets cover every value once in backward order within their
// caps (tensors split when larger), and checksums tell replicas apart.
#define BOOST_TEST_MODULE dp_schedule
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>

#include "actors/dp/trainer/dp_schedule.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(every_example_of_an_epoch_goes_to_one_member_once) {
  for (uint64_t examples : {1ull, 7ull, 128ull, 1000ull, 60000ull})
    for (uint32_t batch : {1u, 5u, 128u})
      for (uint32_t members : {1u, 2u, 3u, 4u}) {
        if (batch < members) continue;
        std::vector<int> seen(examples, 0);
        const uint64_t steps = dp_steps_per_epoch(examples, batch);
        for (uint64_t s = 0; s < steps; ++s)
          for (uint32_t r = 0; r < members; ++r) {
            const auto share = dp_share(examples, batch, s, members, r);
            BOOST_TEST_REQUIRE(share.count <= (batch + members - 1) / members);
            for (uint32_t k = 0; k < share.count; ++k) ++seen[share.first + k];
          }
        for (int n : seen) BOOST_TEST_REQUIRE(n == 1);
        BOOST_TEST(dp_share(examples, batch, steps, members, 0).count == 0u);
      }
}

BOOST_AUTO_TEST_CASE(a_share_is_the_same_examples_as_one_members_batch) {
  // One member with batch 128 computes what two members with 64 each do, split in two.
  const auto whole = dp_share(1000, 128, 3, 1, 0);
  const auto a = dp_share(1000, 128, 3, 2, 0), b = dp_share(1000, 128, 3, 2, 1);
  BOOST_TEST(whole.first == a.first);
  BOOST_TEST(a.first + a.count == b.first);
  BOOST_TEST(a.count + b.count == whole.count);
}

BOOST_AUTO_TEST_CASE(buckets_cover_every_value_once_in_backward_order) {
  const flat_layout layout{
      {{"a.w", {300, 100}}, {"a.b", {300}}, {"b.w", {10, 300}}, {"b.b", {10}}}};
  for (uint64_t cap : {uint64_t{4}, uint64_t{4000}, uint64_t{100000}, uint64_t{25} << 20}) {
    const auto buckets = plan_gradient_buckets(layout, cap);
    BOOST_TEST_REQUIRE(!buckets.empty());
    uint64_t end = layout.total;
    for (size_t i = 0; i < buckets.size(); ++i) {
      const auto& b = buckets[i];
      BOOST_TEST_REQUIRE(b.end == end);  // contiguous, from the last value down
      BOOST_TEST_REQUIRE(b.begin < b.end);
      const uint64_t limit = i == 0 ? std::min<uint64_t>(cap, 1 << 20) : cap;
      BOOST_TEST_REQUIRE((b.end - b.begin) * sizeof(float) <= std::max<uint64_t>(limit, 4));
      BOOST_TEST_REQUIRE(!b.tensors.empty());
      BOOST_TEST_REQUIRE(b.tensors.front() >= b.tensors.back());  // last tensor first
      end = b.begin;
    }
    BOOST_TEST(end == 0u);
  }
  // 25 MiB holds the model: one bucket, but the first bucket's cap is 1 MiB.
  BOOST_TEST(plan_gradient_buckets(layout, uint64_t{25} << 20).size() == 1u);
  // A tensor larger than the cap is split: a.w (30000 values) over several 4000-byte buckets.
  const auto small = plan_gradient_buckets(layout, 4000);
  size_t holding_a_w = 0;
  for (const auto& b : small)
    holding_a_w += std::count(b.tensors.begin(), b.tensors.end(), size_t{0});
  BOOST_TEST(holding_a_w >= 30u);
}

BOOST_AUTO_TEST_CASE(checksums_tell_replicas_apart) {
  std::vector<float> a(1000, 0.5f), b = a;
  BOOST_TEST(parameter_checksum(a) == parameter_checksum(b));
  b[999] = std::nextafter(b[999], 1.0f);
  BOOST_TEST(parameter_checksum(a) != parameter_checksum(b));
}

BOOST_AUTO_TEST_CASE(buckets_keep_tensors_whole_when_they_fit) {
  // The MLP's shapes: fc1 is most of the model and backward finishes it last.
  const flat_layout mlp{{{"fc1.w", {256, 784}},
                         {"fc1.b", {256}},
                         {"fc2.w", {128, 256}},
                         {"fc2.b", {128}},
                         {"fc3.w", {10, 128}},
                         {"fc3.b", {10}}}};
  const auto buckets = plan_gradient_buckets(mlp, uint64_t{1} << 18);  // 0.25 MiB
  BOOST_TEST_REQUIRE(buckets.size() >= 2u);
  // The first bucket holds fc3, fc2 and fc1.b, whole, and nothing of fc1.w.
  BOOST_TEST(buckets[0].begin == mlp.offsets[1]);
  BOOST_TEST((buckets[0].tensors == std::vector<size_t>{5, 4, 3, 2, 1}));
  for (size_t i = 1; i < buckets.size(); ++i)
    BOOST_TEST((buckets[i].tensors == std::vector<size_t>{0}));
}

BOOST_AUTO_TEST_CASE(weighted_shares_cover_each_step_once_in_proportion) {
  const std::vector<double> weights{3.0, 1.0, 0.5};
  for (uint64_t examples : {1000ull, 1001ull})
    for (uint32_t batch : {9u, 128u}) {
      std::vector<int> seen(examples, 0);
      for (uint64_t s = 0; s < dp_steps_per_epoch(examples, batch); ++s)
        for (uint32_t r = 0; r < weights.size(); ++r) {
          const auto share = dp_weighted_share(examples, batch, s, weights, r);
          for (uint32_t k = 0; k < share.count; ++k) ++seen[share.first + k];
        }
      for (int n : seen) BOOST_TEST_REQUIRE(n == 1);
    }
  const auto fast = dp_weighted_share(10000, 900, 0, weights, 0);
  const auto slow = dp_weighted_share(10000, 900, 0, weights, 2);
  BOOST_TEST(fast.count == 600u);
  BOOST_TEST(slow.count == 100u);
}

BOOST_AUTO_TEST_CASE(micro_batches_split_a_share_evenly) {
  BOOST_TEST((micro_batches(64, 4) == std::vector<uint32_t>{16, 16, 16, 16}));
  BOOST_TEST((micro_batches(10, 4) == std::vector<uint32_t>{3, 3, 2, 2}));
  BOOST_TEST((micro_batches(2, 4) == std::vector<uint32_t>{1, 1}));
  BOOST_TEST((micro_batches(5, 1) == std::vector<uint32_t>{5}));
}

BOOST_AUTO_TEST_CASE(a_bucket_holds_only_kept_tensors_or_only_others) {
  flat_layout layout({{"a", {100}}, {"b", {100}}, {"c", {100}}, {"d", {100}}});
  const auto buckets = plan_gradient_buckets(layout, 1 << 20, {false, true, false, false});
  BOOST_TEST_REQUIRE(buckets.size() == 3u);  // [c, d], [b], [a] in backward order
  BOOST_TEST(!buckets[0].full_precision);
  BOOST_TEST((buckets[1].full_precision && buckets[1].tensors == std::vector<size_t>{1}));
  BOOST_TEST(!buckets[2].full_precision);
  uint64_t covered = 0;
  for (const auto& b : buckets) covered += b.end - b.begin;
  BOOST_TEST(covered == layout.total);
}
