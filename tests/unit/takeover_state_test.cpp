// What a standby coordinator takes over with: the work plan restored from the old primary's
// last standing learns from the rejoining workers (work_plan::adopt) exactly what was done,
// and the standing and a member's rejoin survive the codec (malformed ones are refused).
#define BOOST_TEST_MODULE takeover_state_test
#include <boost/test/unit_test.hpp>

#include "actors/ps/work_plan.hpp"
#include "messages/codec.hpp"
#include "tests/unit/expect_error.hpp"

using namespace troupe;
using troupe::testing::fails_with;

namespace {

// Hands out and finishes every chunk left in `plan` (as worker 0); returns batches per epoch.
std::vector<uint64_t> drain(work_plan& plan, uint32_t epochs) {
  std::vector<uint64_t> done(epochs, 0);
  for (auto chunk = plan.claim(0); chunk.count != 0; chunk = plan.claim(0)) {
    BOOST_TEST_REQUIRE(plan.finish(0, chunk));
    done[chunk.epoch] += chunk.count;
  }
  return done;
}

}  // namespace

BOOST_AUTO_TEST_CASE(adopted_chunks_are_neither_lost_nor_done_twice) {
  // The old primary: chunks a, b handed out when it last sent its state; then c, d, e.
  work_plan old{1, 15, 3, 2};
  const auto a = old.claim(0), b = old.claim(1);
  job_checkpoint standing;
  old.save(standing);
  const auto c = old.claim(0), d = old.claim(1), e = old.claim(0);
  (void)e;  // handed out in a reply that died with the old primary: nobody names it
  // The standby's plan: a and b are "returned"; c, d, e not yet handed out.
  auto plan = work_plan::restore(standing, 2);
  // Worker 0 finished a and c; worker 1 finished b and holds d.
  const auto counted0 = plan.adopt(0, {}, {a, c});
  const auto counted1 = plan.adopt(1, {d}, {b});
  BOOST_TEST(counted0.size() == 2u);
  BOOST_TEST(counted1.size() == 1u);
  BOOST_TEST(plan.finished_batches() == 9u);
  // Naming a chunk again (a duplicate report) counts nothing.
  BOOST_TEST(plan.adopt(0, {}, {a}).empty());
  BOOST_TEST_REQUIRE(plan.finish(1, d));
  // What is left is exactly e: handed out again, since nobody holds it.
  const auto left = drain(plan, 1);
  BOOST_TEST(left[0] == 3u);
  BOOST_TEST(plan.epoch_complete(0));
}

BOOST_AUTO_TEST_CASE(a_chunk_that_is_not_the_plans_changes_nothing) {
  work_plan plan{2, 10, 3, 1};
  BOOST_TEST(plan.adopt(0, {work_chunk{0, 1, 3}}, {work_chunk{1, 2, 2}}).empty());
  BOOST_TEST(plan.adopt(0, {}, {work_chunk{5, 0, 3}}).empty());  // no such epoch
  BOOST_TEST(plan.adopt(7, {}, {work_chunk{0, 0, 3}}).empty());  // no such worker
  const auto done = drain(plan, 2);
  BOOST_TEST(done[0] == 10u);
  BOOST_TEST(done[1] == 10u);
}

BOOST_AUTO_TEST_CASE(a_standing_and_a_rejoin_survive_the_codec) {
  work_plan plan{2, 10, 3, 2};
  const auto chunk = plan.claim(0);
  coordinator_standing x;
  x.term = 3;
  x.training = true;
  plan.save(x.plan);
  x.plan.epoch_loss = {1.5, 0};
  x.plan.epoch_batches = {3, 0};
  x.servers = {member_standing{"s0", endpoint{"127.0.0.1", 7001}}, member_standing{"s1"}};
  x.servers[1].lost = true;
  x.workers = {member_standing{"w0"}};
  x.workers[0].steps = 12;
  x.homes = {home_standing{0, {1}}, home_standing{1, {0}}};
  x.losses = {loss_event{"s1", role::server, 2.5, 99, "no heartbeat"}};
  x.takeovers = {takeover_event{1.0, 0.25, 3}};
  x.written = {"/tmp/ck-1"};
  x.chunks_done = 4;
  auto back = decode<coordinator_standing>(encode(x));
  BOOST_TEST_REQUIRE(bool(back));
  BOOST_TEST(back->term == 3u);
  BOOST_TEST(back->servers[0].data.port == 7001);
  BOOST_TEST(back->servers[1].lost);
  BOOST_TEST(back->workers[0].steps == 12u);
  BOOST_TEST(back->homes[1].backups == std::vector<uint32_t>{0});
  BOOST_TEST(back->losses[0].reason == "no heartbeat");
  BOOST_TEST(back->takeovers[0].took_s == 0.25);
  BOOST_TEST(back->plan.pending.size() == 1u);
  BOOST_TEST(back->chunks_done == 4u);
  // A home on a server the standing does not name is refused.
  x.homes[0].primary = 9;
  BOOST_TEST(fails_with(decode<coordinator_standing>(encode(x)), errc::malformed_message));

  // A data-parallel coordinator's part: its lists are one entry per worker.
  dp_group_standing g;
  g.generation = 4;
  g.global_batch = 128;
  g.hosts = {"here"};
  g.examples = {640};
  g.step_examples = {1280};
  g.applied_examples = {1280, 0, 0};
  g.figures = {{"test_auc", 0.9}};
  g.allreduce_bytes = 77;
  g.exposed_s = 0.5;
  x.homes[0].primary = 0;
  x.dp = g;
  auto dp = decode<coordinator_standing>(encode(x));
  BOOST_TEST_REQUIRE(bool(dp));
  BOOST_TEST_REQUIRE(dp->dp.has_value());
  BOOST_TEST(dp->dp->generation == 4u);
  BOOST_TEST(dp->dp->hosts[0] == "here");
  BOOST_TEST(dp->dp->applied_examples == g.applied_examples);
  BOOST_TEST(dp->dp->figures[0].second == 0.9);
  BOOST_TEST(dp->dp->allreduce_bytes == 77u);
  BOOST_TEST(dp->dp->exposed_s == 0.5);
  BOOST_TEST(!back->dp.has_value());  // a parameter-service standing has none
  x.dp->examples.push_back(1);        // a list that does not match the workers
  BOOST_TEST(fails_with(decode<coordinator_standing>(encode(x)), errc::malformed_message));

  rejoin_request r{role::worker, "w0", 0};
  r.host = "rack-1";
  r.generation = 5;
  r.held = {chunk};
  r.finished = {work_chunk{0, 3, 3}};
  r.finished_loss = {0.7};
  auto rejoin = decode<rejoin_request>(encode(r));
  BOOST_TEST_REQUIRE(bool(rejoin));
  BOOST_TEST((rejoin->held == std::vector<work_chunk>{chunk}));
  BOOST_TEST(rejoin->finished_loss[0] == 0.7);
  BOOST_TEST(rejoin->host == "rack-1");
  BOOST_TEST(rejoin->generation == 5u);
  r.finished_loss.clear();  // one loss per finished chunk
  BOOST_TEST(fails_with(decode<rejoin_request>(encode(r)), errc::malformed_message));
  BOOST_TEST(fails_with(decode<rejoin_request>(wire{{'x', 'y'}}), errc::malformed_message));
}
