// The agreement of a new generation of a group with sharded optimizer state (agree_on_pieces,
// --zero-stage 1), members as threads over Gloo: survivors of a loss re-cut the pieces from
// the copies left (values from each piece's holder, whatever the others' parameters hold),
// a member one step behind that holds the step's sums is rolled forward to the step the
// others took, a joiner gets its pieces and the parameters, generation 1 takes member 0's
// parameters, a piece whose every holder is gone fails the agreement with the reason, and
// before any step a loss with no backup starts afresh.
#define BOOST_TEST_MODULE piece_agreement
#include <boost/test/unit_test.hpp>

#include "actors/bucket/elementwise_step.hpp"
#include "actors/dp/collective/gloo_collective.hpp"
#include "actors/dp/compression/compressed_allreduce.hpp"
#include "actors/dp/trainer/piece_agreement.hpp"
#include "collective_ranks.hpp"
#include "troupe/error.hpp"

using namespace troupe;

using troupe::testing::ignore_sigpipe;
BOOST_TEST_GLOBAL_FIXTURE(ignore_sigpipe);

namespace {

const auto timeout = std::chrono::milliseconds(20000);
const std::vector<flat_range> buckets = {{0, 301}, {301, 700}, {1001, 5}};  // 1006 values
constexpr uint64_t values = 1006;

optimizer_config adam() {
  optimizer_config o;
  o.lr = 0.01f;
  return o;
}

// The gradient of step `k` (1-based), the same for every member (already summed).
std::vector<float> gradient(uint64_t k) {
  std::vector<float> g(values);
  for (uint64_t i = 0; i < values; ++i) g[i] = float((i * 7 + k * 3) % 23) - 11.0f;
  return g;
}

// The whole model after `steps` steps: parameters and Adam's moments.
struct reference {
  std::vector<float> params = std::vector<float>(values), m = params, v = params;
  explicit reference(uint64_t steps) {
    for (uint64_t i = 0; i < values; ++i) params[i] = 0.001f * float(i % 97);
    const auto o = adam();
    for (uint64_t k = 1; k <= steps; ++k) step_elementwise(o, o.lr, k, params, m, v, gradient(k));
  }
};

// What member `rank` of a cut of `size` with `backups` holds after `steps` steps of `ref`; its
// parameters outside its pieces are garbage (a gather that failed).
piece_exchange member_of(const reference& ref, uint64_t steps, uint32_t size, uint32_t rank,
                         uint32_t backups, std::vector<float>& params) {
  piece_exchange x;
  x.cut = piece_cut{1, size, rank, backups};
  x.buckets = buckets;
  x.optimizer = adam();
  x.at_step = x.version = steps;
  x.last_applied = true;
  params.assign(values, -99.0f);
  for (uint32_t owner : held_owners(x.cut)) {
    auto h = cut_pieces(buckets, size, owner, x.optimizer);
    for (const auto& p : h.pieces) {
      std::copy_n(ref.m.begin() + p.offset, p.count, h.m.begin() + p.at);
      std::copy_n(ref.v.begin() + p.offset, p.count, h.v.begin() + p.at);
      std::copy_n(ref.params.begin() + p.offset, p.count, params.begin() + p.offset);
    }
    x.held.push_back(std::move(h));
  }
  x.params = params;
  return x;
}

// A member that joins: no pieces, its own initial parameters.
piece_exchange joiner(std::vector<float>& params) {
  piece_exchange x;
  x.buckets = buckets;
  x.optimizer = adam();
  params.assign(values, 7.0f);
  x.params = params;
  return x;
}

struct member {
  piece_exchange x;
  std::vector<float> params;
  caf::expected<std::shared_ptr<sync_result>> agreed = caf::error{};
};

// Runs the agreement of a new generation (generation 2, `backups`) over `members` (rank r is
// members[r]).
void agree(std::vector<member>& members, uint32_t backups) {
  const auto n = static_cast<uint32_t>(members.size());
  for (uint32_t r = 0; r < n; ++r) members[r].x.next = piece_cut{2, n, r, backups};
  auto failed = testing::run_ranks(
      n,
      [&](rendezvous_store& store, uint32_t r,
          uint32_t size) -> caf::expected<std::unique_ptr<collective>> {
        return make_gloo_collective(store, gloo_options{r, size, "127.0.0.1", "g2/", timeout});
      },
      [&](collective& c, uint32_t r) {
        members[r].agreed = agree_on_pieces(c, members[r].x, timeout);
      });
  BOOST_TEST_REQUIRE(failed.empty());
}

// Every member holds `ref`'s parameters, and the moments of the pieces of the new cut.
void expect_state_of(const std::vector<member>& members, const reference& ref, uint64_t steps) {
  for (uint32_t r = 0; r < members.size(); ++r) {
    BOOST_TEST_CONTEXT("member " << r) {
      if (!members[r].agreed) BOOST_TEST_MESSAGE(describe(members[r].agreed.error()));
      BOOST_TEST_REQUIRE(bool(members[r].agreed));
      BOOST_TEST((*members[r].agreed)->steps == steps);
      const auto& x = members[r].x;
      BOOST_TEST(x.at_step == steps);
      BOOST_TEST(x.version == steps);
      BOOST_TEST(x.cut.generation == 2u);
      BOOST_TEST(members[r].params == ref.params, boost::test_tools::per_element());
      BOOST_TEST_REQUIRE(x.held.size() == held_owners(x.cut).size());
      for (const auto& h : x.held)
        for (const auto& p : h.pieces)
          for (uint64_t i = 0; i < p.count; ++i) {
            BOOST_TEST_REQUIRE(h.m[p.at + i] == ref.m[p.offset + i]);
            BOOST_TEST_REQUIRE(h.v[p.at + i] == ref.v[p.offset + i]);
          }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(survivors_of_a_loss_cut_the_pieces_anew_from_the_copies_left) {
  // Four members with a backup each; member 2 is lost: its pieces live on with member 3.
  const reference ref(5);
  std::vector<member> members(3);
  const uint32_t old_ranks[] = {0, 1, 3};
  for (uint32_t r = 0; r < 3; ++r)
    members[r].x = member_of(ref, 5, 4, old_ranks[r], 1, members[r].params);
  agree(members, 1);
  expect_state_of(members, ref, 5);
}

BOOST_AUTO_TEST_CASE(a_member_one_step_behind_is_rolled_forward_first) {
  // Member 0 took step 6; members 1 and 2 hold step 6's sums but never heard it was applied
  // (their meta's allreduce failed when member 3 died). Member 3's pieces: with member 0.
  const reference before(5), after(6);
  std::vector<member> members(3);
  members[0].x = member_of(after, 6, 4, 0, 1, members[0].params);
  for (uint32_t r = 1; r < 3; ++r) {
    auto& x = members[r].x = member_of(before, 5, 4, r, 1, members[r].params);
    x.summed_step = 6;
    const auto g = gradient(6);
    for (const auto& h : x.held)
      for (const auto& p : h.pieces)
        x.pending.insert(x.pending.end(), g.begin() + p.offset, g.begin() + p.offset + p.count);
  }
  agree(members, 1);
  expect_state_of(members, after, 6);
}

BOOST_AUTO_TEST_CASE(a_joiner_gets_its_pieces_and_the_parameters) {
  const reference ref(3);
  std::vector<member> members(3);
  for (uint32_t r = 0; r < 2; ++r) members[r].x = member_of(ref, 3, 2, r, 0, members[r].params);
  members[2].x = joiner(members[2].params);
  agree(members, 2);  // (two backups of three members: every member holds every piece)
  expect_state_of(members, ref, 3);
}

BOOST_AUTO_TEST_CASE(generation_one_takes_member_zeros_parameters) {
  std::vector<member> members(2);
  for (auto& m : members) m.x = joiner(m.params);
  members[0].params.assign(values, 0.5f);
  agree(members, 1);
  for (const auto& m : members) {
    BOOST_TEST_REQUIRE(bool(m.agreed));
    BOOST_TEST((*m.agreed)->steps == 0u);
    BOOST_TEST(m.params == std::vector<float>(values, 0.5f), boost::test_tools::per_element());
    BOOST_TEST(m.x.held.size() == 2u);
    for (const auto& h : m.x.held) BOOST_TEST(h.m == std::vector<float>(h.total, 0.0f));
  }
}

BOOST_AUTO_TEST_CASE(a_piece_whose_holders_are_all_gone_fails_the_agreement_and_says_so) {
  const reference ref(2);
  std::vector<member> members(2);
  const uint32_t old_ranks[] = {0, 2};  // member 1 of 3 is lost, with no backup
  for (uint32_t r = 0; r < 2; ++r)
    members[r].x = member_of(ref, 2, 3, old_ranks[r], 0, members[r].params);
  agree(members, 0);
  for (const auto& m : members) {
    BOOST_TEST_REQUIRE(!m.agreed);
    BOOST_TEST(has_code(m.agreed.error(), errc::job_failed));
    BOOST_TEST(describe(m.agreed.error()).find("pieces of member 1") != std::string::npos,
               describe(m.agreed.error()));
  }
}

BOOST_AUTO_TEST_CASE(before_any_step_a_loss_with_no_backup_starts_afresh) {
  // The cut of generation 1 was made, no step taken: the pieces hold nothing but values.
  const reference ref(0);
  std::vector<member> members(2);
  const uint32_t old_ranks[] = {0, 2};
  for (uint32_t r = 0; r < 2; ++r)
    members[r].x = member_of(ref, 0, 3, old_ranks[r], 0, members[r].params);
  members[0].params = ref.params;  // (member 0's parameters are the job's)
  members[0].x.params = members[0].params;
  agree(members, 0);
  for (const auto& m : members) {
    BOOST_TEST_REQUIRE(bool(m.agreed));
    BOOST_TEST((*m.agreed)->steps == 0u);
    BOOST_TEST(m.params == ref.params, boost::test_tools::per_element());
    BOOST_TEST(m.x.cut.generation == 2u);
  }
}
