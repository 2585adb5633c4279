// Unit tests of row_arena (actors/bucket/row_arena.hpp), the compact rows of an embedding
// table: random adds, erases and lookups against std::unordered_map, through index growth and
// backward-shift deletion (ids chosen to collide); a row's floats and count stay its own; freed
// slots are reused; ids() lists every held id once.
#define BOOST_TEST_MODULE row_arena
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <random>
#include <unordered_map>

#include "actors/bucket/row_arena.hpp"

using troupe::row_arena;

BOOST_AUTO_TEST_CASE(adds_erases_and_finds_as_a_hash_map_does) {
  row_arena arena(3);
  std::unordered_map<uint64_t, float> reference;  // id -> the first float it was given
  std::mt19937_64 rng{7};
  // Few distinct ids, many operations: runs of collisions, erases in the middle of runs.
  std::uniform_int_distribution<uint64_t> pick(0, 20000);
  for (int op = 0; op < 200000; ++op) {
    const uint64_t id = pick(rng) * 1024;  // multiples of the first index size
    const bool held = reference.count(id) > 0;
    BOOST_TEST_REQUIRE(arena.find(id).has_value() == held, "op " << op << " id " << id);
    if (rng() % 3 == 0) {
      arena.erase(id);
      reference.erase(id);
    } else if (!held) {
      const uint32_t slot = arena.add(id);
      BOOST_TEST_REQUIRE(arena.floats(slot)[0] == 0.0f);  // a fresh slot is zeros
      arena.floats(slot)[0] = static_cast<float>(op);
      arena.steps(slot) = id;
      reference[id] = static_cast<float>(op);
    }
    BOOST_TEST_REQUIRE(arena.size() == reference.size());
  }
  for (const auto& [id, first] : reference) {
    const auto slot = arena.find(id);
    BOOST_TEST_REQUIRE(slot.has_value());
    BOOST_TEST_REQUIRE(arena.floats(*slot)[0] == first);
    BOOST_TEST_REQUIRE(arena.steps(*slot) == id);
  }
  auto ids = arena.ids();
  std::sort(ids.begin(), ids.end());
  BOOST_TEST(ids.size() == reference.size());
  BOOST_TEST((std::adjacent_find(ids.begin(), ids.end()) == ids.end()));
}

BOOST_AUTO_TEST_CASE(a_freed_slot_is_reused_and_rows_keep_their_floats) {
  row_arena arena(4);
  std::vector<uint32_t> slots;
  for (uint64_t id = 0; id < 10000; ++id) {
    slots.push_back(arena.add(id));
    auto row = arena.floats(slots.back());
    BOOST_TEST_REQUIRE(row.size() == 4u);
    std::fill(row.begin(), row.end(), static_cast<float>(id));
  }
  arena.erase(1234);
  BOOST_TEST(!arena.find(1234));
  BOOST_TEST(arena.add(99999) == slots[1234]);
  for (uint64_t id = 0; id < 10000; ++id) {
    if (id == 1234) continue;
    const auto slot = arena.find(id);
    BOOST_TEST_REQUIRE(slot.has_value());
    BOOST_TEST_REQUIRE(arena.floats(*slot)[3] == static_cast<float>(id));
  }
  BOOST_TEST(arena.size() == 10000u);
}
