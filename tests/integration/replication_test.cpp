// Buckets as real actors in one process: a bucket under a supervisor restarts with exactly
// the values, moments and counters it had; a primary with a backup acknowledges a push only
// once the backup applied it, keeps the backup identical through pushes, pulls, retires and
// a new backup's state transfer, and a promoted backup answers with the same values; a resent
// push is acknowledged without being applied twice; a primary whose backup was promoted steps
// down; a primary whose backup fails holds its acknowledgements until the coordinator names a
// new backup or drops the failed one.
#define BOOST_TEST_MODULE replication
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <future>
#include <thread>

#include "actors/bucket/parameter_bucket.hpp"
#include "actors/supervision/supervisors/supervisor.hpp"
#include "tests/support/progress.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"

using namespace troupe;

namespace {

constexpr auto timeout = std::chrono::seconds(10);

bucket_spec spec_of(uint32_t workers = 2) {
  optimizer_config adam;
  adam.lr = 0.01f;
  bucket_spec spec{5, workers, adam, {}, {}, {compensation_config::kind::dcasgd, 0.1f}};
  spec.tensors.push_back(dense_tensor{"w", {2, 2}, 0, {0.5f, -1.0f, 2.0f, 0.25f}});
  return spec;
}

wire push_of(uint32_t worker, uint64_t clock, float g, bool resend = false) {
  push_request push{5, worker, clock, vector_clock{std::vector<uint64_t>{clock, clock}}};
  push.dense.push_back(dense_tensor{"w", {2, 2}, 0, {g, -g, 2 * g, 0.5f * g}});
  push.resend = resend;
  return encode(push);
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

  bucket_actor_config config() const {
    return bucket_actor_config{(*self)->address(),
                               fixed_link(caf::actor_cast<coordinator_actor>(*self)), timeout,
                               logger{"bucket", log_level::error}};
  }

  bucket_actor spawn_bucket(std::shared_ptr<bucket_store> store) {
    return sys->spawn(parameter_bucket, std::move(store), config());
  }

  bool push(const bucket_actor& b, const wire& w) {
    bool ok = false;
    (*self)
        ->request(b, timeout, push_atom_v, w)
        .receive([&](const wire&) { ok = true; }, [](caf::error&) {});
    return ok;
  }

  pull_reply pull(const bucket_actor& b, uint32_t worker, uint64_t clock) {
    pull_reply out;
    (*self)
        ->request(b, timeout, pull_atom_v, encode(pull_request{5, worker, clock}))
        .receive(
            [&](const wire& w) {
              if (auto r = decode<pull_reply>(w)) out = std::move(*r);
            },
            [](caf::error&) {});
    return out;
  }

  bucket_stats stats(const bucket_actor& b) {
    bucket_stats out;
    (*self)
        ->request(b, timeout, stats_atom_v)
        .receive(
            [&](const wire& w) {
              if (auto s = decode<bucket_stats>(w)) out = std::move(*s);
            },
            [](caf::error&) {});
    return out;
  }

  // The bucket's whole saved state, part by part.
  std::vector<wire> saved(const bucket_actor& b) {
    std::vector<wire> out;
    for (uint32_t i = 0, total = 1; i < total; ++i)
      (*self)
          ->request(b, timeout, save_atom_v, i)
          .receive(
              [&](wire& part, uint32_t n) {
                out.push_back(std::move(part));
                total = n;
              },
              [&](caf::error&) { total = 0; });
    return out;
  }

  // A push from another actor, answered whenever the bucket answers: true once acknowledged.
  std::future<bool> push_later(const bucket_actor& b, wire w) {
    return std::async(std::launch::async, [this, b, w] {
      caf::scoped_actor worker{*sys};
      bool ok = false;
      worker->request(b, timeout, push_atom_v, w)
          .receive([&](const wire&) { ok = true; }, [](caf::error&) {});
      return ok;
    });
  }

  template <class... Ts>
  bool ask(const bucket_actor& b, Ts... xs) {
    bool ok = false;
    (*self)->request(b, timeout, xs...).receive([&](bool) { ok = true; }, [](caf::error&) {});
    return ok;
  }
};

std::vector<float> values(const pull_reply& r) {
  return r.tensors.empty() ? std::vector<float>{} : r.tensors[0].values;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_restarted_bucket_has_exactly_the_state_it_had, fixture) {
  auto store = std::make_shared<bucket_store>(spec_of());
  supervisor_config sup;
  sup.parent = (*self)->address();
  sup.backoff = std::chrono::milliseconds(1);
  sup.log = logger{"supervisor", log_level::error};
  const auto cfg_for_child = config();
  child_spec child{"bucket-5",
                   [store, cfg_for_child](caf::local_actor* parent, caf::actor_addr supervisor) {
                     auto c = cfg_for_child;
                     c.supervisor = supervisor;
                     return caf::actor_cast<caf::actor>(parent->spawn(parameter_bucket, store, c));
                   }};
  auto supervisor_handle = sys->spawn(supervisor, sup, std::vector<child_spec>{child});
  auto current = [&](const caf::actor& old) {
    caf::actor found;
    const bool restarted = testing::await(
        [&] {
          found = caf::actor{};
          (*self)
              ->request(supervisor_handle, timeout, which_atom_v, std::string{"bucket-5"})
              .receive([&](caf::actor& a) { found = std::move(a); }, [](caf::error&) {});
          return found && found != old;
        },
        std::chrono::seconds(10));
    return restarted ? caf::actor_cast<bucket_actor>(found) : bucket_actor{};
  };
  auto bucket = current(caf::actor{});
  for (uint64_t clock = 0; clock < 3; ++clock) {
    pull(bucket, 0, clock);
    BOOST_TEST_REQUIRE(push(bucket, push_of(0, clock, 0.1f * (clock + 1))));
  }
  const auto before = pull(bucket, 1, 0);
  const auto stats_before = stats(bucket);
  for (int crash = 0; crash < 3; ++crash) {
    (*self)->send(bucket, fault_atom_v);
    bucket = current(caf::actor_cast<caf::actor>(bucket));
    BOOST_TEST_REQUIRE(static_cast<bool>(bucket));
    BOOST_TEST(values(pull(bucket, 1, 0)) == values(before), boost::test_tools::per_element());
    BOOST_TEST(stats(bucket).updates_applied == stats_before.updates_applied);
    BOOST_TEST((stats(bucket).clock == stats_before.clock));
  }
  // The same next push lands on the same Adam moments and compensation memory as before.
  bucket_store reference{spec_of()};
  for (uint64_t clock = 0; clock < 3; ++clock) {
    reference.grant_pull(0, clock);
    BOOST_TEST_REQUIRE(static_cast<bool>(
        reference.apply(*decode<push_request>(push_of(0, clock, 0.1f * (clock + 1))))));
  }
  reference.grant_pull(1, 0);
  BOOST_TEST_REQUIRE(push(bucket, push_of(1, 0, 0.7f)));
  BOOST_TEST_REQUIRE(
      static_cast<bool>(reference.apply(*decode<push_request>(push_of(1, 0, 0.7f)))));
  BOOST_TEST(values(pull(bucket, 0, 3)) == reference.slices()[0].values,
             boost::test_tools::per_element());
  (*self)->send_exit(supervisor_handle, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_backup_mirrors_its_primary_and_takes_over_with_the_same_values, fixture) {
  auto primary = spawn_bucket(std::make_shared<bucket_store>(spec_of()));
  auto backup = spawn_bucket(std::make_shared<bucket_store>(spec_of()));
  // Some history before the backup exists: the state transfer must carry it.
  pull(primary, 0, 0);
  BOOST_TEST_REQUIRE(push(primary, push_of(0, 0, 0.3f)));
  // Another bucket that the coordinator did not name cannot write the backup's state.
  auto intruder = spawn_bucket(std::make_shared<bucket_store>(spec_of()));
  BOOST_TEST_REQUIRE(ask(backup, primary_atom_v, caf::actor_cast<caf::actor>(primary)));
  BOOST_TEST(!ask(intruder, backup_atom_v, caf::actor_cast<caf::actor>(backup)));
  BOOST_TEST(stats(backup).updates_applied == 0u);
  (*self)->send_exit(intruder, caf::exit_reason::user_shutdown);
  BOOST_TEST_REQUIRE(ask(primary, backup_atom_v, caf::actor_cast<caf::actor>(backup)));
  for (uint64_t clock = 1; clock < 4; ++clock) {
    pull(primary, 0, clock);
    pull(primary, 1, clock - 1);
    BOOST_TEST_REQUIRE(push(primary, push_of(0, clock, 0.2f)));
    BOOST_TEST_REQUIRE(push(primary, push_of(1, clock - 1, -0.1f)));
    // Acknowledged means applied on both.
    BOOST_TEST(stats(backup).updates_applied == stats(primary).updates_applied);
  }
  // A resend of a push both already have is acknowledged and applied nowhere.
  BOOST_TEST_REQUIRE(push(primary, push_of(0, 3, 0.2f, true)));
  BOOST_TEST(stats(primary).updates_applied == 7u);
  BOOST_TEST(stats(backup).updates_applied == 7u);
  (*self)->send(primary, retire_atom_v, uint32_t{1});
  // Byte for byte the same state: values, Adam moments, what each worker read, clocks.
  const auto mine = saved(primary), theirs = saved(backup);
  BOOST_TEST_REQUIRE(mine.size() == theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) BOOST_TEST((mine[i].bytes == theirs[i].bytes));
  const auto seen = values(pull(primary, observer_worker, 0));
  // The primary is lost; the backup is promoted and answers with the same values.
  (*self)->send_exit(primary, caf::exit_reason::kill);
  BOOST_TEST_REQUIRE(ask(backup, promote_atom_v));
  BOOST_TEST(values(pull(backup, observer_worker, 0)) == seen, boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(push(backup, push_of(0, 4, 0.05f)));
  BOOST_TEST(stats(backup).updates_applied == 8u);
  (*self)->send_exit(backup, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(state_parts_out_of_order_or_undecodable_change_nothing, fixture) {
  auto bucket = spawn_bucket(std::make_shared<bucket_store>(spec_of()));
  // Parts out of order, and a part that does not decode, change nothing.
  BOOST_TEST(!ask(bucket, restore_atom_v, uint32_t{1}, uint32_t{2}, wire{}));
  BOOST_TEST(!ask(bucket, restore_atom_v, uint32_t{0}, uint32_t{1}, wire{{'x', 'y'}}));
  BOOST_TEST(stats(bucket).version == 0u);
  BOOST_TEST(values(pull(bucket, observer_worker, 0)) == spec_of().tensors[0].values,
             boost::test_tools::per_element());
  (*self)->send_exit(bucket, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_primary_whose_backup_was_promoted_steps_down, fixture) {
  // A primary declared lost (frozen, cut off) that comes back must not go on alone.
  auto primary = spawn_bucket(std::make_shared<bucket_store>(spec_of()));
  auto backup = spawn_bucket(std::make_shared<bucket_store>(spec_of()));
  BOOST_TEST_REQUIRE(ask(backup, primary_atom_v, caf::actor_cast<caf::actor>(primary)));
  BOOST_TEST_REQUIRE(ask(primary, backup_atom_v, caf::actor_cast<caf::actor>(backup)));
  BOOST_TEST_REQUIRE(push(primary, push_of(0, 0, 0.3f)));
  BOOST_TEST_REQUIRE(ask(backup, promote_atom_v));
  caf::error refused;
  (*self)
      ->request(primary, timeout, push_atom_v, push_of(1, 0, 0.2f))
      .receive([](const wire&) {}, [&](caf::error& err) { refused = std::move(err); });
  BOOST_TEST(describe(refused).find("not_primary") == 0u, describe(refused));
  BOOST_TEST(pull(primary, 0, 1).tensors.empty());  // it serves nobody now
  // The worker resends to the new primary, which applies it once.
  BOOST_TEST_REQUIRE(push(backup, push_of(1, 0, 0.2f, true)));
  BOOST_TEST(stats(backup).updates_applied == 2u);
  (*self)->send_exit(primary, caf::exit_reason::user_shutdown);
  (*self)->send_exit(backup, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_primary_whose_backup_fails_acknowledges_only_when_the_coordinator_says,
                        fixture) {
  // Alone, a primary cannot tell a dead backup from one that is about to replace it (the
  // primary cut off from the coordinator and the backup, not from the workers).
  using namespace std::chrono_literals;
  auto primary = spawn_bucket(std::make_shared<bucket_store>(spec_of()));
  auto backup = spawn_bucket(std::make_shared<bucket_store>(spec_of()));
  BOOST_TEST_REQUIRE(ask(backup, primary_atom_v, caf::actor_cast<caf::actor>(primary)));
  BOOST_TEST_REQUIRE(ask(primary, backup_atom_v, caf::actor_cast<caf::actor>(backup)));
  BOOST_TEST_REQUIRE(push(primary, push_of(0, 0, 0.3f)));
  (*self)->send_exit(backup, caf::exit_reason::kill);
  auto held = push_later(primary, push_of(1, 0, 0.2f));
  BOOST_TEST((held.wait_for(500ms) == std::future_status::timeout));
  BOOST_TEST(stats(primary).updates_applied == 2u);  // applied, not acknowledged
  // The coordinator names a new backup: its state copy holds the push, acknowledged then.
  auto second = spawn_bucket(std::make_shared<bucket_store>(spec_of()));
  BOOST_TEST_REQUIRE(ask(second, primary_atom_v, caf::actor_cast<caf::actor>(primary)));
  BOOST_TEST_REQUIRE(ask(primary, backup_atom_v, caf::actor_cast<caf::actor>(second)));
  BOOST_TEST(held.get());
  BOOST_TEST(stats(second).updates_applied == 2u);
  // That one fails too, and the coordinator drops it (its server was declared lost): what the
  // primary held goes out, and from then on it acknowledges alone.
  (*self)->send_exit(second, caf::exit_reason::kill);
  auto held_again = push_later(primary, push_of(0, 1, 0.1f));
  BOOST_TEST((held_again.wait_for(500ms) == std::future_status::timeout));
  BOOST_TEST_REQUIRE(ask(primary, backup_atom_v, caf::actor{}));
  BOOST_TEST(held_again.get());
  BOOST_TEST(push(primary, push_of(1, 1, 0.1f)));
  BOOST_TEST(stats(primary).updates_applied == 4u);
  (*self)->send_exit(primary, caf::exit_reason::user_shutdown);
}
