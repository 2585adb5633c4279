// Sharded optimizer state in checkpoints (piece_checkpoint.hpp): the records that 4 members
// save of their own pieces refill the pieces of any other cut (3 members with a backup, 1
// member holding all) value for value; a record of the wrong length, moment or step and
// records that leave a gap are refused, saying why.
#define BOOST_TEST_MODULE piece_checkpoint
#include <boost/test/unit_test.hpp>

#include "actors/dp/trainer/piece_checkpoint.hpp"
#include "troupe/error.hpp"

using namespace troupe;

namespace {

const std::vector<flat_range> buckets = {{0, 301}, {301, 700}, {1001, 5}};  // 1006 values

optimizer_config adam() {
  return optimizer_config{};  // (Adam: two moments)
}

// Owner `owner`'s pieces of a cut of `size`, their moments set to a function of the flat index.
held_pieces filled(uint32_t size, uint32_t owner) {
  auto h = cut_pieces(buckets, size, owner, adam());
  for (const auto& p : h.pieces)
    for (uint64_t i = 0; i < p.count; ++i) {
      h.m[p.at + i] = float(p.offset + i);
      h.v[p.at + i] = -float(p.offset + i);
    }
  return h;
}

// Every record each of `size` members saves of its own pieces, after 7 steps.
std::vector<wire> saved_by(uint32_t size) {
  std::vector<wire> out;
  for (uint32_t r = 0; r < size; ++r) {
    auto own = std::make_shared<const held_pieces>(filled(size, r));
    for (const auto& make : piece_save_plan(own, 7)) out.push_back(make());
  }
  return out;
}

piece_restorer restorer_for(const piece_cut& cut) {
  return piece_restorer(cut, cut_held(buckets, cut, adam()), 2);
}

}  // namespace

BOOST_AUTO_TEST_CASE(four_members_pieces_refill_any_other_cut) {
  const auto records = saved_by(4);
  for (const piece_cut& cut : {piece_cut{1, 3, 1, 1}, piece_cut{1, 3, 0, 0}, piece_cut{1, 1, 0, 0},
                               piece_cut{1, 4, 3, 2}}) {
    BOOST_TEST_CONTEXT("member " << cut.rank << " of " << cut.size << ", backups " << cut.backups) {
      auto restorer = restorer_for(cut);
      for (const auto& w : records) BOOST_TEST_REQUIRE(!restorer.add(w));
      auto done = std::move(restorer).finish();
      BOOST_TEST_REQUIRE(bool(done));
      BOOST_TEST(done->version == 7u);
      BOOST_TEST_REQUIRE(done->held.size() == held_owners(cut).size());
      for (const auto& h : done->held) {
        const auto expected = filled(cut.size, h.owner);
        BOOST_TEST(h.m == expected.m, boost::test_tools::per_element());
        BOOST_TEST(h.v == expected.v, boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_record_of_the_wrong_length_moment_or_step_is_refused) {
  auto record = encode_piece_record(3, 10, 1, std::vector<float>(5, 1.0f));
  BOOST_TEST(bool(decode_piece_record(record)));
  auto short_one = record;
  short_one.bytes.resize(short_one.bytes.size() - 1);
  BOOST_TEST(!decode_piece_record(short_one));
  auto junk = record;
  junk.bytes[0] = 'X';
  BOOST_TEST(!decode_piece_record(junk));
  // A moment SGD does not keep; records of two steps.
  auto sgd_like = piece_restorer(piece_cut{1, 1, 0, 0}, {cut_pieces(buckets, 1, 0, adam())}, 1);
  BOOST_TEST(has_code(sgd_like.add(record), errc::corrupt_data));
  auto restorer = restorer_for(piece_cut{1, 1, 0, 0});
  BOOST_TEST(!restorer.add(encode_piece_record(3, 0, 0, std::vector<float>(5, 1.0f))));
  BOOST_TEST(has_code(restorer.add(encode_piece_record(4, 5, 0, std::vector<float>(5, 1.0f))),
                      errc::corrupt_data));
}

BOOST_AUTO_TEST_CASE(records_that_leave_a_gap_are_refused_saying_how_much_they_fill) {
  auto records = saved_by(2);
  records.pop_back();  // member 1's last record
  auto restorer = restorer_for(piece_cut{1, 1, 0, 0});
  for (const auto& w : records) BOOST_TEST_REQUIRE(!restorer.add(w));
  auto done = std::move(restorer).finish();
  BOOST_TEST_REQUIRE(!done);
  BOOST_TEST(has_code(done.error(), errc::corrupt_data));
  BOOST_TEST(describe(done.error()).find("of the 2012 moment values") != std::string::npos,
             describe(done.error()));
}
