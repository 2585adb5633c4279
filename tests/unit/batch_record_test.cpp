// Unit tests of batch_record, the batches a bucket has counted: overlap against merged ranges
// of one epoch, merging (in order, out of order, bridging a gap), epochs kept apart, and the
// saved ranges rebuilding the same record.
#include <boost/test/unit_test.hpp>

#include "actors/bucket/batch_record.hpp"

using namespace troupe;

BOOST_AUTO_TEST_SUITE(batch_record_suite)

BOOST_AUTO_TEST_CASE(a_counted_range_overlaps_itself_and_its_parts_only) {
  batch_record record;
  BOOST_TEST(!record.overlaps(batch_range{0, 4, 2}));
  record.add(batch_range{0, 4, 2});  // batches 4 and 5 of epoch 0
  BOOST_TEST(record.overlaps(batch_range{0, 4, 2}));
  BOOST_TEST(record.overlaps(batch_range{0, 5, 1}));
  BOOST_TEST(record.overlaps(batch_range{0, 3, 2}));  // 3 and 4
  BOOST_TEST(!record.overlaps(batch_range{0, 2, 2}));
  BOOST_TEST(!record.overlaps(batch_range{0, 6, 1}));
  BOOST_TEST(!record.overlaps(batch_range{1, 4, 2}));  // another epoch
  BOOST_TEST(!record.overlaps(batch_range{0, 4, 0}));  // no batches
}

BOOST_AUTO_TEST_CASE(ranges_merge_in_any_order_into_a_few) {
  batch_record record;
  for (uint64_t first : {0, 1, 2, 5, 6, 4, 3, 9}) record.add(batch_range{2, first, 1});
  const auto ranges = record.ranges();
  BOOST_TEST_REQUIRE(ranges.size() == 2u);
  BOOST_TEST((ranges[0] == batch_range{2, 0, 7}));
  BOOST_TEST((ranges[1] == batch_range{2, 9, 1}));
  BOOST_TEST(record.saved_bytes() == 32u);
  for (uint64_t b = 0; b < 7; ++b) BOOST_TEST(record.overlaps(batch_range{2, b, 1}));
  BOOST_TEST(!record.overlaps(batch_range{2, 7, 2}));
}

BOOST_AUTO_TEST_CASE(the_saved_ranges_rebuild_the_same_record) {
  batch_record record;
  record.add(batch_range{0, 10, 4});
  record.add(batch_range{3, 0, 2});
  record.add(batch_range{0, 0, 4});
  const auto copy = batch_record::from(record.ranges());
  BOOST_TEST(copy.ranges().size() == record.ranges().size());
  BOOST_TEST(copy.overlaps(batch_range{0, 12, 1}));
  BOOST_TEST(copy.overlaps(batch_range{3, 1, 1}));
  BOOST_TEST(!copy.overlaps(batch_range{0, 5, 4}));
}

BOOST_AUTO_TEST_SUITE_END()
