// Unit tests of troupe::vector_clock: ticking and growing, merging, sums, happens-before order
// (including clocks of different lengths) and staleness.
#define BOOST_TEST_MODULE vector_clock
#include <boost/test/unit_test.hpp>

#include <vector>

#include "troupe/vector_clock.hpp"

using troupe::clock_order;
using troupe::vector_clock;

namespace {

std::vector<uint64_t> entries_of(const vector_clock& c) {
  return {c.entries().begin(), c.entries().end()};
}

}  // namespace

BOOST_AUTO_TEST_CASE(default_clock_is_empty) {
  vector_clock c;
  BOOST_TEST(c.size() == 0u);
  BOOST_TEST(c.sum() == 0u);
  BOOST_TEST(c.at(0) == 0u);
  BOOST_TEST(c.at(100) == 0u);
}

BOOST_AUTO_TEST_CASE(sized_clock_starts_at_zero) {
  vector_clock c{3};
  BOOST_TEST(c.size() == 3u);
  BOOST_TEST(entries_of(c) == (std::vector<uint64_t>{0, 0, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(tick_counts_one_event) {
  vector_clock c{2};
  c.tick(1);
  c.tick(1);
  c.tick(0);
  BOOST_TEST(entries_of(c) == (std::vector<uint64_t>{1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(tick_grows_the_clock) {
  vector_clock c;
  c.tick(3);
  BOOST_TEST(c.size() == 4u);
  BOOST_TEST(entries_of(c) == (std::vector<uint64_t>{0, 0, 0, 1}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(at_past_the_end_is_zero) {
  vector_clock c{std::vector<uint64_t>{5, 6}};
  BOOST_TEST(c.at(1) == 6u);
  BOOST_TEST(c.at(2) == 0u);
}

BOOST_AUTO_TEST_CASE(merge_takes_elementwise_max) {
  vector_clock a{std::vector<uint64_t>{1, 5, 2}};
  vector_clock b{std::vector<uint64_t>{3, 4, 2}};
  a.merge(b);
  BOOST_TEST(entries_of(a) == (std::vector<uint64_t>{3, 5, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(merge_with_longer_clock_grows) {
  vector_clock a{std::vector<uint64_t>{7}};
  vector_clock b{std::vector<uint64_t>{1, 2, 3}};
  a.merge(b);
  BOOST_TEST(entries_of(a) == (std::vector<uint64_t>{7, 2, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(merge_with_shorter_clock_keeps_length) {
  vector_clock a{std::vector<uint64_t>{1, 2, 3}};
  vector_clock b{std::vector<uint64_t>{9}};
  a.merge(b);
  BOOST_TEST(entries_of(a) == (std::vector<uint64_t>{9, 2, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(merge_with_empty_is_identity) {
  vector_clock a{std::vector<uint64_t>{4, 0, 1}};
  a.merge(vector_clock{});
  BOOST_TEST(entries_of(a) == (std::vector<uint64_t>{4, 0, 1}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(sum_adds_all_entries) {
  BOOST_TEST(vector_clock(std::vector<uint64_t>{1, 2, 3, 4}).sum() == 10u);
  BOOST_TEST(vector_clock(std::vector<uint64_t>{uint64_t{1} << 40, 1}).sum() ==
             (uint64_t{1} << 40) + 1);
}

BOOST_AUTO_TEST_CASE(compare_equal) {
  vector_clock a{std::vector<uint64_t>{1, 2}};
  vector_clock b{std::vector<uint64_t>{1, 2}};
  BOOST_TEST((a.compare(b) == clock_order::equal));
  BOOST_TEST((a == b));
}

BOOST_AUTO_TEST_CASE(compare_empty_clocks_are_equal) {
  BOOST_TEST((vector_clock{}.compare(vector_clock{}) == clock_order::equal));
}

BOOST_AUTO_TEST_CASE(compare_before_and_after) {
  vector_clock a{std::vector<uint64_t>{1, 2}};
  vector_clock b{std::vector<uint64_t>{1, 3}};
  BOOST_TEST((a.compare(b) == clock_order::before));
  BOOST_TEST((b.compare(a) == clock_order::after));
  BOOST_TEST(!(a == b));
}

BOOST_AUTO_TEST_CASE(compare_concurrent) {
  vector_clock a{std::vector<uint64_t>{2, 1}};
  vector_clock b{std::vector<uint64_t>{1, 2}};
  BOOST_TEST((a.compare(b) == clock_order::concurrent));
  BOOST_TEST((b.compare(a) == clock_order::concurrent));
}

BOOST_AUTO_TEST_CASE(compare_missing_entries_count_as_zero) {
  vector_clock shorter{std::vector<uint64_t>{1, 2}};
  vector_clock padded{std::vector<uint64_t>{1, 2, 0, 0}};
  BOOST_TEST((shorter.compare(padded) == clock_order::equal));
  BOOST_TEST((padded.compare(shorter) == clock_order::equal));
  BOOST_TEST((shorter == padded));
}

BOOST_AUTO_TEST_CASE(compare_longer_clock_with_extra_events_is_after) {
  vector_clock shorter{std::vector<uint64_t>{1, 2}};
  vector_clock longer{std::vector<uint64_t>{1, 2, 1}};
  BOOST_TEST((longer.compare(shorter) == clock_order::after));
  BOOST_TEST((shorter.compare(longer) == clock_order::before));
}

BOOST_AUTO_TEST_CASE(compare_different_lengths_concurrent) {
  vector_clock shorter{std::vector<uint64_t>{3}};
  vector_clock longer{std::vector<uint64_t>{1, 0, 5}};
  BOOST_TEST((shorter.compare(longer) == clock_order::concurrent));
  BOOST_TEST((longer.compare(shorter) == clock_order::concurrent));
}

BOOST_AUTO_TEST_CASE(merge_result_is_after_or_equal_both_inputs) {
  vector_clock a{std::vector<uint64_t>{2, 1}};
  vector_clock b{std::vector<uint64_t>{1, 2, 1}};
  vector_clock m = a;
  m.merge(b);
  BOOST_TEST((m.compare(a) == clock_order::after));
  BOOST_TEST((m.compare(b) == clock_order::after));
  vector_clock again = m;
  again.merge(a);
  BOOST_TEST((again.compare(m) == clock_order::equal));
}

BOOST_AUTO_TEST_CASE(staleness_counts_events_since_read) {
  vector_clock read{std::vector<uint64_t>{1, 2}};
  vector_clock now{std::vector<uint64_t>{4, 3, 2}};
  BOOST_TEST(now.staleness_since(read) == 6u);
}

BOOST_AUTO_TEST_CASE(staleness_of_same_clock_is_zero) {
  vector_clock c{std::vector<uint64_t>{4, 3}};
  BOOST_TEST(c.staleness_since(c) == 0u);
}

BOOST_AUTO_TEST_CASE(staleness_is_zero_when_read_is_ahead) {
  vector_clock read{std::vector<uint64_t>{9, 9}};
  vector_clock now{std::vector<uint64_t>{1, 1}};
  BOOST_TEST(now.staleness_since(read) == 0u);
}

BOOST_AUTO_TEST_CASE(staleness_since_empty_is_sum) {
  vector_clock now{std::vector<uint64_t>{2, 5}};
  BOOST_TEST(now.staleness_since(vector_clock{}) == 7u);
}
