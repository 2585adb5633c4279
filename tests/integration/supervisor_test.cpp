// The supervisor with real actors: each strategy restarts the right children, restart
// policies, backoff before a restart, and escalation once the restart intensity is exceeded.
#define BOOST_TEST_MODULE supervisor
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <thread>

#include "actors/supervision/supervisors/guards.hpp"
#include "actors/supervision/supervisors/supervisor.hpp"
#include "tests/support/progress.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/node.hpp"

using namespace troupe;
using troupe::testing::is_error;

namespace {

constexpr auto timeout = std::chrono::seconds(10);

// A child that crashes, stops or answers on request.
caf::behavior worker_like(caf::event_based_actor* self, caf::actor_addr supervisor_addr) {
  accept_exits_only_from(self, supervisor_addr, logger{"child", log_level::error});
  return {
      [=](const std::string& what) -> std::string {
        if (what == "crash") self->quit(make_error(errc::job_failed, "boom"));
        if (what == "stop") self->quit();
        return "pong";
      },
  };
}

child_spec spec(std::string name, restart_policy policy = restart_policy::permanent) {
  return child_spec{std::move(name),
                    [](caf::local_actor* self, caf::actor_addr sup) {
                      return self->spawn(worker_like, std::move(sup));
                    },
                    policy};
}

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<caf::scoped_actor> self;

  fixture() {
    launch_options opts;
    opts.threads = 2;
    configure_actor_system(cfg, opts);
    sys = std::make_unique<caf::actor_system>(cfg);
    self = std::make_unique<caf::scoped_actor>(*sys);
  }

  supervisor_actor start(restart_strategy strategy, std::vector<child_spec> children,
                         uint32_t max_restarts = 3,
                         std::chrono::milliseconds backoff = std::chrono::milliseconds(1)) {
    supervisor_config config;
    config.strategy = strategy;
    config.max_restarts = max_restarts;
    config.backoff = backoff;
    config.parent = (*self)->address();
    config.log = logger{"supervisor", log_level::error};
    return sys->spawn(supervisor, config, std::move(children));
  }

  // The running actor of child `name` other than `old`, waiting for the supervisor to see a
  // failure and for the restart's backoff.
  caf::actor which(const supervisor_actor& sup, const std::string& name,
                   const caf::actor& old = {}) {
    caf::actor found;
    const bool restarted = testing::await(
        [&] {
          found = caf::actor{};
          (*self)
              ->request(sup, timeout, which_atom_v, name)
              .receive([&](caf::actor& a) { found = std::move(a); }, [](caf::error&) {});
          return found && (!old || found.address() != old.address());
        },
        std::chrono::seconds(10));
    return restarted ? found : caf::actor{};
  }

  // Makes `child` crash and waits until it is gone.
  void crash(const caf::actor& child) {
    (*self)->monitor(child);
    (*self)->send(child, std::string{"crash"});
    bool down = false;
    (*self)->receive_while([&] { return !down; })(
        [&](caf::down_msg& msg) { down = msg.source == child.address(); },
        [](const std::string&) {});
  }

  std::pair<uint64_t, uint64_t> stats(const supervisor_actor& sup) {
    std::pair<uint64_t, uint64_t> out;
    (*self)
        ->request(sup, timeout, stats_atom_v)
        .receive(
            [&](uint64_t restarts, uint64_t escalations) {
              out = {restarts, escalations};
            },
            [](caf::error&) {});
    return out;
  }

  ~fixture() { self.reset(); }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(one_for_one_restarts_only_the_failed_child, fixture) {
  auto sup = start(restart_strategy::one_for_one, {spec("a"), spec("b"), spec("c")});
  const auto a = which(sup, "a"), b = which(sup, "b"), c = which(sup, "c");
  crash(b);
  BOOST_TEST(static_cast<bool>(which(sup, "b", b)));  // restarted
  BOOST_TEST((which(sup, "a").address() == a.address()));
  BOOST_TEST((which(sup, "c").address() == c.address()));
  BOOST_TEST(stats(sup).first == 1u);
  (*self)->send_exit(sup, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(one_for_all_restarts_every_child, fixture) {
  auto sup = start(restart_strategy::one_for_all, {spec("a"), spec("b"), spec("c")});
  const auto a = which(sup, "a"), b = which(sup, "b"), c = which(sup, "c");
  crash(b);
  BOOST_TEST(static_cast<bool>(which(sup, "b", b)));  // all restart together
  BOOST_TEST((which(sup, "a").address() != a.address()));
  BOOST_TEST((which(sup, "c").address() != c.address()));
  (*self)->send_exit(sup, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(rest_for_one_restarts_the_failed_child_and_later_ones, fixture) {
  auto sup = start(restart_strategy::rest_for_one, {spec("a"), spec("b"), spec("c")});
  const auto a = which(sup, "a"), b = which(sup, "b"), c = which(sup, "c");
  crash(b);
  BOOST_TEST(static_cast<bool>(which(sup, "b", b)));  // b and c restart together
  BOOST_TEST((which(sup, "a").address() == a.address()));
  BOOST_TEST((which(sup, "c").address() != c.address()));
  (*self)->send_exit(sup, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(transient_and_temporary_children_follow_their_policy, fixture) {
  auto sup = start(restart_strategy::one_for_one,
                   {spec("t", restart_policy::transient), spec("x", restart_policy::temporary)});
  const auto t = which(sup, "t");
  (*self)->monitor(t);
  (*self)->send(t, std::string{"stop"});  // a normal exit: transient children stay down
  (*self)->receive([](caf::down_msg&) {}, [](const std::string&) {});
  crash(which(sup, "x"));  // temporary children are never restarted
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  caf::error missing;
  (*self)
      ->request(sup, timeout, which_atom_v, std::string{"t"})
      .receive([](caf::actor&) {}, [&](caf::error& err) { missing = std::move(err); });
  BOOST_TEST(static_cast<bool>(missing));
  BOOST_TEST(stats(sup).first == 0u);
  (*self)->send_exit(sup, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_restart_waits_for_the_backoff, fixture) {
  auto sup = start(restart_strategy::one_for_one, {spec("a")}, 3, std::chrono::milliseconds(200));
  const auto a = which(sup, "a");
  const auto began = std::chrono::steady_clock::now();
  crash(a);
  BOOST_TEST(static_cast<bool>(which(sup, "a", a)));
  BOOST_TEST((std::chrono::steady_clock::now() - began >= std::chrono::milliseconds(200)));
  (*self)->send_exit(sup, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_fourth_failure_within_the_period_escalates, fixture) {
  auto sup = start(restart_strategy::one_for_one, {spec("a"), spec("b")}, 3);
  const auto b = which(sup, "b");
  caf::actor a = which(sup, "a");
  for (int i = 0; i < 3; ++i) {
    crash(a);
    a = which(sup, "a", a);  // restarted, with state intact in a real job
    BOOST_TEST_REQUIRE(static_cast<bool>(a));
  }
  BOOST_TEST(stats(sup).first == 3u);
  (*self)->monitor(sup);
  (*self)->monitor(b);
  crash(a);
  caf::error reason;
  int downs = 0;
  (*self)->receive_for(downs, 2)([&](caf::down_msg& msg) {
    if (msg.source == sup.address()) reason = msg.reason;
  });
  BOOST_TEST(testing::is_error(reason, errc::job_failed));  // the parent learns why
  // ... and the other child went down with the supervisor (both down messages arrived).
}

BOOST_FIXTURE_TEST_CASE(a_failure_no_restart_can_mend_ends_an_idle_supervisor_with_its_reason,
                        fixture) {
  auto child = spec("only", restart_policy::transient);
  child.restart_on = [](const caf::error&) { return false; };  // nothing mends it
  supervisor_config config;
  config.parent = (*self)->address();
  config.quit_when_idle = true;
  config.log = logger{"supervisor", log_level::error};
  auto sup = sys->spawn(supervisor, config, std::vector<child_spec>{child});
  (*self)->monitor(sup);
  crash(which(sup, "only"));
  caf::error reason;
  (*self)->receive([&](caf::down_msg& msg) { reason = msg.reason; });
  BOOST_TEST(is_error(reason, errc::job_failed));  // the child's own reason
  BOOST_TEST(stats(sup).first == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_supervisor_hosts_children_added_later, fixture) {
  auto sup = start(restart_strategy::one_for_one, {});
  caf::actor added;
  (*self)
      ->request(sup, timeout, host_atom_v, std::make_shared<const child_spec>(spec("late")))
      .receive([&](caf::actor& a) { added = std::move(a); }, [](caf::error&) {});
  BOOST_TEST_REQUIRE(static_cast<bool>(added));
  crash(added);
  BOOST_TEST(static_cast<bool>(which(sup, "late", added)));  // restarted like the others
  (*self)->send_exit(sup, caf::exit_reason::user_shutdown);
}
