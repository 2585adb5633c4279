// The `nccl` collective backend against the sums computed on the CPU here: members as threads
// of one process, one GPU each (as many members as GPUs, at most 4; NCCL refuses two members
// on one GPU), every operation, every member getting the same bits; a member that never
// joins makes the others fail within the bound; a call of more than 256 MiB goes in pieces;
// the allreduce_group forms an nccl group and
// reduces a bucket through it. Without a GPU (CI) the backend refuses with a clear error.
#define BOOST_TEST_MODULE nccl_collective
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <cmath>

#include "actors/dp/collective/nccl_collective.hpp"
#include "actors/dp/trainer/allreduce_group.hpp"
#include "kernels/cuda/device.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "tests/unit/collective_ranks.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/node.hpp"

using namespace troupe;
using troupe::testing::has_gpu;
using troupe::testing::value_of;

namespace {

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    configure_actor_system(cfg, launch_options{});
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

uint32_t members_here() {
  return static_cast<uint32_t>(std::clamp(kernels::cuda::device_count(), 1, 4));
}

collective_call call(uint32_t tag) {
  return collective_call{tag, std::chrono::seconds(30)};
}

testing::member_maker nccl_members(caf::actor_system& sys,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  return [&sys, timeout](rendezvous_store& store, uint32_t r, uint32_t size) {
    return make_nccl_collective(sys, store,
                                nccl_options{r, size, static_cast<int>(r), "g1/", timeout});
  };
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(without_a_gpu_the_backend_refuses, system_fixture) {
  if (kernels::cuda::device_count() > 0) return;  // the GPU cases follow
  BOOST_TEST(testing::fails_with(nccl_devices(), errc::device_failure));
  memory_store store;
  BOOST_TEST(
      testing::fails_with(make_nccl_collective(*sys, store, nccl_options{}), errc::device_failure));
}

BOOST_FIXTURE_TEST_CASE(allreduce_matches_the_cpu_sum_with_the_same_bits_everywhere, system_fixture,
                        *boost::unit_test::precondition(has_gpu)) {
  const uint32_t size = members_here();
  const std::vector<size_t> lengths{0, 1, 7, 1001, 300000, size_t{25} << 18};  // up to 25 MiB
  std::vector<std::vector<float>> results(size);
  auto failures = testing::run_ranks(size, nccl_members(*sys), [&](collective& g, uint32_t r) {
    uint32_t tag = 0;
    for (size_t n : lengths) {
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = value_of(r, i);
      if (auto err = g.allreduce(data, call(++tag))) {
        BOOST_TEST_MESSAGE("member " << r << ": " << describe(err));
        return (void)(results[r] = {-1});
      }
      results[r].insert(results[r].end(), data.begin(), data.end());
    }
  });
  BOOST_TEST_REQUIRE(failures.empty());
  size_t at = 0;
  for (size_t n : lengths)
    for (size_t i = 0; i < n; ++i, ++at) {
      float want = 0;
      for (uint32_t r = 0; r < size; ++r) want += value_of(r, i);
      for (uint32_t r = 0; r < size; ++r) {
        BOOST_TEST_REQUIRE(results[r].size() > at);
        BOOST_TEST_REQUIRE(std::abs(results[r][at] - want) <= 1e-4f * (1 + std::abs(want)));
      }
    }
  for (uint32_t r = 1; r < size; ++r) BOOST_TEST((results[r] == results[0]));
}

BOOST_FIXTURE_TEST_CASE(an_allreduce_larger_than_one_call_goes_in_pieces, system_fixture,
                        *boost::unit_test::precondition(has_gpu)) {
  const uint32_t size = members_here();
  const size_t n = (size_t{1} << 26) + 1001;  // 256 MiB and a bit: two pieces
  std::vector<int> right(size, 0);
  auto failures = testing::run_ranks(size, nccl_members(*sys), [&](collective& g, uint32_t r) {
    std::vector<float> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = value_of(r, i);
    if (auto err = g.allreduce(data, call(1))) {
      BOOST_TEST_MESSAGE("member " << r << ": " << describe(err));
      return;
    }
    for (size_t i : {size_t{0}, size_t{1} << 26, n - 1}) {
      float want = 0;
      for (uint32_t m = 0; m < size; ++m) want += value_of(m, i);
      if (std::abs(data[i] - want) > 1e-4f * (1 + std::abs(want))) return;
    }
    right[r] = 1;
  });
  BOOST_TEST_REQUIRE(failures.empty());
  for (uint32_t r = 0; r < size; ++r) BOOST_TEST(right[r] == 1);
}

BOOST_FIXTURE_TEST_CASE(the_sharded_operations_move_the_right_values, system_fixture,
                        *boost::unit_test::precondition(has_gpu)) {
  const uint32_t size = members_here();
  const size_t each = 1000;
  std::vector<std::vector<float>> reduced(size), sent(size), swapped(size);
  std::vector<int> barrier_ok(size, 0);
  auto failures = testing::run_ranks(size, nccl_members(*sys), [&](collective& g, uint32_t r) {
    std::vector<float> data(each * size);
    for (size_t i = 0; i < data.size(); ++i) data[i] = value_of(r, i);
    if (g.reduce_scatter(data, call(1)) || g.all_gather(data, call(2))) return;
    reduced[r] = data;
    for (size_t i = 0; i < data.size(); ++i) data[i] = value_of(r, i);
    if (g.broadcast(data, size - 1, call(3))) return;
    sent[r] = data;
    for (size_t i = 0; i < data.size(); ++i) data[i] = float(r * 10000 + i);
    if (g.all_to_all(data, call(4))) return;
    swapped[r] = data;
    barrier_ok[r] = !g.barrier(call(5));
  });
  BOOST_TEST_REQUIRE(failures.empty());
  for (uint32_t r = 0; r < size; ++r) {
    BOOST_TEST_REQUIRE(reduced[r].size() == each * size);
    BOOST_TEST_REQUIRE(sent[r].size() == each * size);
    BOOST_TEST_REQUIRE(swapped[r].size() == each * size);
    for (size_t i = 0; i < each * size; ++i) {
      float want = 0;
      for (uint32_t m = 0; m < size; ++m) want += value_of(m, i);
      BOOST_TEST_REQUIRE(std::abs(reduced[r][i] - want) <= 1e-4f * (1 + std::abs(want)));
      BOOST_TEST_REQUIRE(sent[r][i] == value_of(size - 1, i));
    }
    for (uint32_t j = 0; j < size; ++j)  // shard j came from member j, which sent us shard r
      for (size_t k = 0; k < each; ++k)
        BOOST_TEST_REQUIRE(swapped[r][j * each + k] == float(j * 10000 + r * each + k));
    BOOST_TEST(barrier_ok[r] == 1);
  }
}

BOOST_FIXTURE_TEST_CASE(a_member_that_never_joins_makes_the_group_fail_within_its_bound,
                        system_fixture, *boost::unit_test::precondition(has_gpu)) {
  // Member 0 waits for a member 1 that never comes: the communicator's setup gives up.
  memory_store store;
  const auto began = std::chrono::steady_clock::now();
  auto alone = make_nccl_collective(*sys, store,
                                    nccl_options{0, 2, 0, "g1/", std::chrono::milliseconds(2000)});
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  BOOST_TEST(!alone);
  if (!alone) BOOST_TEST_MESSAGE(describe(alone.error()));
  BOOST_TEST(waited < 10.0);
  // Options no group can have are refused at once, before any wait on the store: a negative
  // local rank, a rank beyond the group. (A local rank beyond the GPUs this process sees is
  // taken modulo their number: one GPU per process under CUDA_VISIBLE_DEVICES.)
  const auto asked = std::chrono::steady_clock::now();
  auto negative = make_nccl_collective(*sys, store, nccl_options{1, 2, -1, "g2/"});
  BOOST_TEST(testing::fails_with(negative, errc::bad_configuration));
  auto outside = make_nccl_collective(*sys, store, nccl_options{2, 2, 0, "g3/"});
  BOOST_TEST(testing::fails_with(outside, errc::bad_configuration));
  const double refused_in =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  BOOST_TEST(refused_in < 5.0);
}

BOOST_FIXTURE_TEST_CASE(the_allreduce_group_reduces_a_bucket_over_nccl, system_fixture,
                        *boost::unit_test::precondition(has_gpu)) {
  const uint32_t size = std::min<uint32_t>(members_here(), 2);
  auto store = std::make_shared<memory_store>();
  caf::scoped_actor self{*sys};
  std::vector<allreduce_group_actor> groups;
  std::vector<std::vector<float>> buckets(size);
  for (uint32_t r = 0; r < size; ++r) {
    groups.push_back(sys->spawn<caf::detached>(allreduce_group, logger{"test"}));
    buckets[r].resize(4096);
    for (size_t i = 0; i < buckets[r].size(); ++i) buckets[r][i] = value_of(r, i);
  }
  // Every member forms at once (each waits for the others), then reduces.
  for (uint32_t r = 0; r < size; ++r) {
    auto form = std::make_shared<group_form>();
    form->generation = 1;
    form->rank = r;
    form->size = size;
    form->collective = troupe::collective_kind::nccl;
    form->hosts.assign(size, "here");  // one host: the local rank picks the GPU
    form->store = store;
    self->send(groups[r], form_atom_v, std::shared_ptr<const group_form>{form});
  }
  for (uint32_t r = 0; r < size; ++r)
    self->receive([](bool) {}, [](caf::error& err) { BOOST_FAIL(describe(err)); },
                  caf::after(std::chrono::seconds(60)) >> [] { BOOST_FAIL("no group formed"); });
  for (uint32_t r = 0; r < size; ++r)
    self->send(groups[r], reduce_atom_v,
               std::shared_ptr<const reduce_order>{new reduce_order{buckets[r], 1}});
  for (uint32_t r = 0; r < size; ++r)
    self->receive([](const reduce_done&) {}, [](caf::error& err) { BOOST_FAIL(describe(err)); },
                  caf::after(std::chrono::seconds(60)) >> [] { BOOST_FAIL("no bucket reduced"); });
  for (uint32_t r = 0; r < size; ++r)
    for (size_t i = 0; i < buckets[r].size(); ++i) {
      float want = 0;
      for (uint32_t m = 0; m < size; ++m) want += value_of(m, i);
      BOOST_TEST_REQUIRE(std::abs(buckets[r][i] - want) <= 1e-4f * (1 + std::abs(want)));
    }
  for (auto& g : groups) self->send_exit(g, caf::exit_reason::user_shutdown);
}

// tests/gpu/run.sh sets TROUPE_REQUIRE_GPU=1: there a missing GPU is a failure, not a skip.
BOOST_AUTO_TEST_CASE(a_gpu_is_present_when_required) {
  if (troupe::testing::gpu_required()) BOOST_TEST(troupe::kernels::cuda::device_count() > 0);
}
