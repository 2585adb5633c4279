// Unit tests of the two plans as the job shell sees them (job_plan, actors/job/
// coordinator_state.hpp), on their own, without a job: during a takeover, which members are
// missing (live in the standing, not back yet) and which have rejoined, for the parameter
// service's plan (servers and workers) and the data-parallel plan (members); the live members
// the job's end stops (none that is lost); and each plan's figures in the job's last log line.
// The plans inside a running job (placement, generations, the standing sent and taken over)
// are the job tests' (fmnist_job_test, dp_job_test, hybrid_job_test, the takeover tests).
#define BOOST_TEST_MODULE job_plan
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>

#include <string>
#include <vector>

#include "actors/dp/plan/dp_coordinator.hpp"
#include "actors/ps/coordinator.hpp"

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
