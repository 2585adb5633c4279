// Unit tests of batch_record, the batches a bucket has counted: overlap against merged ranges
// of one epoch, merging (in order, out of order, bridging a gap), epochs kept apart, and the
// saved ranges rebuilding the same record; an epoch done from batch 0 kept as its end, going
// back among the ranges when a gap opens after it.
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

BOOST_AUTO_TEST_CASE(an_epoch_from_batch_0_stays_one_range_through_gaps_and_bridges) {
  batch_record record;
  for (uint32_t epoch = 0; epoch < 1000; ++epoch)  // a long job: every epoch done in order
    for (uint64_t first = 0; first < 12; first += 3) record.add(batch_range{epoch, first, 3});
  BOOST_TEST(record.ranges().size() == 1000u);
  BOOST_TEST((record.ranges()[999] == batch_range{999, 0, 12}));
  BOOST_TEST(record.overlaps(batch_range{500, 11, 1}));
  BOOST_TEST(!record.overlaps(batch_range{500, 12, 4}));
  record.add(batch_range{500, 20, 2});  // a gap after the range from 0
  BOOST_TEST(record.overlaps(batch_range{500, 21, 1}));
  BOOST_TEST(!record.overlaps(batch_range{500, 14, 2}));
  BOOST_TEST(record.ranges().size() == 1001u);
  record.add(batch_range{500, 12, 8});  // bridged: one range from 0 again
  BOOST_TEST(record.ranges().size() == 1000u);
  BOOST_TEST(record.overlaps(batch_range{500, 15, 1}));
  record.add(batch_range{2000000000, 0, 1});  // far ahead (malformed): kept, no vector sized
  BOOST_TEST(record.overlaps(batch_range{2000000000, 0, 1}));
  BOOST_TEST(batch_record::from(record.ranges()).ranges().size() == 1001u);
}

BOOST_AUTO_TEST_SUITE_END()
