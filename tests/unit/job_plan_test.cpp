// Unit tests of the two plans as the job shell sees them (job_plan, actors/job/
// coordinator_state.hpp), on their own, without a job: during a takeover, which members are
// missing (live in the standing, not back yet) and which have rejoined, for the parameter
// service's plan (servers and workers) and the data-parallel plan (members); the live members
// the job's end stops (none that is lost); each plan's figures in the job's last log line; and
// what each gives the shell's membership and console: its busy states, its live members'
// activity, its member cards (handles only while live), its rows of the tree, its views and
// its operator actions.
// The plans inside a running job (placement, generations, the standing sent and taken over)
// are the job tests' (fmnist_job_test, dp_job_test, hybrid_job_test, the takeover tests).
#define BOOST_TEST_MODULE job_plan
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>

#include <string>
#include <vector>

#include "actors/dp/plan/dp_plan.hpp"
#include "actors/ps/ps_plan.hpp"

using namespace troupe;

namespace {

// Live actors whose addresses and handles stand for members that rejoined.
struct actors {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<caf::actor> spawned;
  caf::actor one() {
    spawned.push_back(sys.spawn([]() -> caf::behavior { return {[](int) {}}; }));
    return spawned.back();
  }
  ~actors() {
    for (auto& a : spawned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
};

member named(std::string name) {
  member m;
  m.name = std::move(name);
  return m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_ps_plan_counts_its_missing_and_rejoined_servers_and_workers) {
  actors a;
  ps_state ps;
  auto back = a.one();
  ps.roster.server_members = {named("s0"), named("s1"), named("s2")};
  ps.roster.servers.resize(3);
  ps.roster.server_members[0].address = back.address();  // rejoined
  ps.roster.server_members[1].lost = true;               // lost before: never missing
  // s2: live in the standing, not back yet
  ps.roster.worker_members = {named("w0"), named("w1")};
  ps.roster.workers.resize(2);
  ps.roster.worker_members[1].address = a.one().address();
  BOOST_TEST(ps.missing() == 2u);   // s2, w0
  BOOST_TEST(ps.rejoined() == 2u);  // s0, w1
  std::vector<caf::actor> live;
  ps.live_members(live);
  BOOST_TEST(live.size() == 4u);  // every member not lost (handles or not)
}

BOOST_AUTO_TEST_CASE(the_dp_plan_counts_its_missing_and_rejoined_members) {
  actors a;
  dp_state dp;
  dp.members = {dp_member{"w0"}, dp_member{"w1"}, dp_member{"w2"}};
  dp.members[0].handle = caf::actor_cast<dp_worker_actor>(a.one());
  dp.members[1].lost = true;
  BOOST_TEST(dp.missing() == 1u);   // w2
  BOOST_TEST(dp.rejoined() == 1u);  // w0
  std::vector<caf::actor> live;
  dp.live_members(live);
  BOOST_TEST(live.size() == 2u);  // w0, w2: the lost one is not asked to stop
}

BOOST_AUTO_TEST_CASE(each_plan_adds_its_own_figures_to_the_last_log_line) {
  job_report r;
  r.updates_applied = 120;
  r.updates_rejected = 3;
  r.allreduce_bytes = 2500000;
  r.allreduce_s = 1.5;
  r.overlap = 0.25;
  const ps_state ps;
  const dp_state dp;
  BOOST_TEST(ps.summary(r).find("120 updates applied, 3 rejected") != std::string::npos);
  BOOST_TEST(dp.summary(r).find("allreduce 2.5 MB in 1.50 s (overlap 0.25)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_ps_plan_gives_the_shell_cards_tree_rows_views_and_activity) {
  actors a;
  ps_state ps;
  ps.roster.server_members = {named("s0"), named("s1")};
  ps.roster.servers = {caf::actor_cast<server_actor>(a.one()),
                       caf::actor_cast<server_actor>(a.one())};
  ps.roster.server_members[1].lost = true;
  ps.roster.worker_members = {named("w0")};
  ps.roster.workers = {caf::actor_cast<worker_actor>(a.one())};
  heartbeat beat;
  beat.cpu_seconds = 1.5;
  beat.activity = {member_activity{}};
  ps.roster.worker_members[0].presence.take(beat);  // it has sent a heartbeat
  ps.directory.homes.resize(1);
  ps.directory.homes[0].primary_server = 0;
  std::vector<member_card> cards;
  ps.cards(cards);
  BOOST_TEST_REQUIRE(cards.size() == 3u);
  BOOST_TEST(cards[0].role == "server");
  BOOST_TEST(bool(cards[0].handle));
  BOOST_TEST(!cards[0].heard.has_value());  // no heartbeat yet
  BOOST_TEST(cards[1].state == "lost");
  BOOST_TEST(!cards[1].handle);  // a lost member is told nothing
  BOOST_TEST(cards[2].role == "worker");
  BOOST_TEST(cards[2].heard.has_value());
  BOOST_TEST(cards[2].cpu_s == 1.5);
  BOOST_TEST(cards[2].has_metrics);
  table_view tree{{"actor", "kind", "node", "state", "restarts", "mailbox"}, {}};
  ps.tree_rows({{{"s0", "bucket-0"}, "7"}}, tree);
  BOOST_TEST_REQUIRE(tree.rows.size() == 5u);  // s0 and its bucket, s1, w0's node and w0
  BOOST_TEST(tree.rows[1][0] == "    bucket-0");
  BOOST_TEST(tree.rows[1][5] == "7");
  BOOST_TEST(tree.rows[2][3] == "lost");
  std::vector<heard_activity> heard;
  ps.activity(heard);
  BOOST_TEST(heard.size() == 2u);  // w0 and s0: not the lost server
  BOOST_TEST(!ps.busy());
  ps.checkpoints.taking = true;
  BOOST_TEST(ps.busy());
  BOOST_TEST((ps.views() == std::vector<std::string>{"workers", "buckets", "diag"}));
  BOOST_TEST((ps.actions() == std::vector<std::string>{"drain", "inject-fault"}));
}

BOOST_AUTO_TEST_CASE(the_dp_plan_gives_the_shell_cards_tree_rows_views_and_activity) {
  actors a;
  dp_state dp;
  dp.generation = 3;
  dp.members = {dp_member{"w0"}, dp_member{"w1"}};
  dp.members[0].handle = caf::actor_cast<dp_worker_actor>(a.one());
  dp.members[0].host = "h0";
  dp.members[1].handle = caf::actor_cast<dp_worker_actor>(a.one());
  dp.members[1].lost = true;
  std::vector<member_card> cards;
  dp.cards(cards);
  BOOST_TEST_REQUIRE(cards.size() == 2u);
  BOOST_TEST(cards[0].address == "h0");
  BOOST_TEST(bool(cards[0].handle));
  BOOST_TEST(!cards[0].has_metrics);  // a member's node metrics are its own
  BOOST_TEST(!cards[1].handle);
  table_view tree{{"actor", "kind", "node", "state", "restarts", "mailbox"}, {}};
  dp.tree_rows({}, tree);
  BOOST_TEST_REQUIRE(tree.rows.size() == 5u);  // the group, and each member's two actors
  BOOST_TEST(tree.rows[0][1] == "generation 3");
  BOOST_TEST(tree.rows[0][3] == "1 member");
  std::vector<heard_activity> heard;
  dp.activity(heard);
  BOOST_TEST(heard.size() == 1u);
  BOOST_TEST(!dp.busy());
  dp.evaluating = true;
  BOOST_TEST(dp.busy());
  BOOST_TEST((dp.views() == std::vector<std::string>{"group"}));
  BOOST_TEST(dp.actions().empty());  // drain and fault injection are the parameter service's
}
