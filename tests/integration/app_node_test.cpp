// app_node with real actors and a real console handshake on loopback: a console that knows
// the secret reads the tree of the supervisors an app showed (children, kinds, restarts) and
// its node; one that does not is refused, as is a node of another wire schema version; the job
// views and commands say there is no job.
#define BOOST_TEST_MODULE app_node
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/supervision/supervisor.hpp"
#include "messages/codec.hpp"
#include "messages/protocol.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/app_node.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/node.hpp"
#include "troupe/supervision.hpp"

using namespace troupe;
using troupe::testing::fails_with;
using troupe::testing::is_error;
using troupe::testing::succeeded;

namespace {

constexpr auto answer_within = std::chrono::seconds(10);

caf::behavior idle_child(caf::event_based_actor*) {
  return {[](const std::string& what) { return what; }};
}

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  launch_options opts;
  logger quiet{"app-node-test", log_level::error};

  fixture() {
    opts.threads = 2;
    opts.listen = {"127.0.0.1", 0};
    opts.secret = "app-node-test-secret";
    opts.join_timeout = std::chrono::seconds(5);
    opts.name = "test-app";
    configure_actor_system(cfg, opts);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  caf::actor supervise(std::vector<std::string> names) {
    std::vector<child_spec> children;
    for (auto& name : names) {
      child_spec spec{
          name, [](caf::local_actor* self, caf::actor_addr) { return self->spawn(idle_child); }};
      spec.kind = "tester";
      children.push_back(std::move(spec));
    }
    supervisor_config config;
    config.log = quiet;
    return spawn_supervisor(*sys, config, std::move(children));
  }

  // A console's view, through the same handshake as troupe-console.
  caf::expected<table_view> view(uint16_t port, const std::string& secret,
                                 const std::string& name) {
    launch_options console = opts;
    console.coordinator = {"127.0.0.1", port};
    console.secret = secret;
    auto coordinator = join_cluster(*sys, console, role::console, "test-console", quiet);
    if (!coordinator) return std::move(coordinator.error());
    caf::scoped_actor self{*sys};
    caf::expected<table_view> out = make_error(errc::timeout, "no answer");
    self->request(*coordinator, answer_within, inspect_atom_v, name)
        .receive([&](const wire& w) { out = decode<table_view>(w); },
                 [&](caf::error& err) { out = std::move(err); });
    return out;
  }
};

bool has_row(const table_view& t, const std::vector<std::string>& cells) {
  for (const auto& row : t.rows) {
    bool all = true;
    for (size_t i = 0; i < cells.size() && all; ++i) all = i < row.size() && row[i] == cells[i];
    if (all) return true;
  }
  return false;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_console_reads_the_tree_of_what_the_app_showed, fixture) {
  auto node = app_node::start(*sys, opts, quiet);
  BOOST_TEST_REQUIRE(succeeded(node));
  BOOST_TEST(node->port() != 0u);
  auto sup = supervise({"alpha", "beta"});
  node->show("testers", sup);

  // beta fails once; its supervisor restarts it.
  caf::scoped_actor self{*sys};
  caf::actor beta;
  self->request(caf::actor_cast<supervisor_actor>(sup), answer_within, which_atom_v,
                std::string{"beta"})
      .receive([&](const caf::actor& a) { beta = a; }, [](caf::error&) {});
  BOOST_TEST_REQUIRE(static_cast<bool>(beta));
  caf::anon_send_exit(beta, caf::exit_reason::kill);
  table_view tree;
  for (int tries = 0; tries < 100; ++tries) {  // until the restart shows
    auto t = view(node->port(), opts.secret, "tree");
    BOOST_TEST_REQUIRE(succeeded(t));
    tree = *t;
    if (has_row(tree, {"    beta", "tester", "test-app", "live", "1"})) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  BOOST_TEST(has_row(tree, {"test-app", "node"}));
  BOOST_TEST(has_row(tree, {"  testers", "supervisor", "test-app", "live"}));
  BOOST_TEST(has_row(tree, {"    alpha", "tester", "test-app", "live", "0"}));
  BOOST_TEST(has_row(tree, {"    beta", "tester", "test-app", "live", "1"}));

  auto nodes = view(node->port(), opts.secret, "nodes");
  BOOST_TEST_REQUIRE(succeeded(nodes));
  BOOST_TEST(has_row(*nodes, {"app", "test-app"}));
  BOOST_TEST(fails_with(view(node->port(), opts.secret, "buckets"), errc::bad_configuration));
  node->stop();
  caf::anon_send_exit(sup, caf::exit_reason::kill);
}

BOOST_FIXTURE_TEST_CASE(a_console_without_the_secret_is_refused, fixture) {
  auto node = app_node::start(*sys, opts, quiet);
  BOOST_TEST_REQUIRE(succeeded(node));
  BOOST_TEST(fails_with(view(node->port(), "not-the-secret", "tree"), errc::authentication_failed));
  node->stop();
}

BOOST_FIXTURE_TEST_CASE(a_node_of_another_schema_version_is_refused, fixture) {
  auto node = app_node::start(*sys, opts, quiet);
  BOOST_TEST_REQUIRE(succeeded(node));
  auto gk = sys->middleman().remote_actor<gatekeeper_actor>("127.0.0.1", node->port());
  BOOST_TEST_REQUIRE(static_cast<bool>(gk));
  hello old{role::worker, "old-node", std::vector<uint8_t>(32, 7)};
  old.schema_version = wire_schema_version - 1;
  caf::scoped_actor self{*sys};
  caf::error refused;
  self->request(*gk, answer_within, hello_atom_v, encode(old))
      .receive([](const wire&) {}, [&](caf::error& err) { refused = std::move(err); });
  BOOST_TEST(is_error(refused, errc::bad_configuration));
  const auto why = describe(refused);
  BOOST_TEST(why.find("version " + std::to_string(wire_schema_version)) != std::string::npos, why);
  BOOST_TEST(why.find("speaks " + std::to_string(wire_schema_version - 1)) != std::string::npos,
             why);
  node->stop();
}

BOOST_FIXTURE_TEST_CASE(a_node_needs_a_secret_and_a_free_port, fixture) {
  auto open = opts;
  open.secret.clear();
  BOOST_TEST(fails_with(app_node::start(*sys, open, quiet), errc::bad_configuration));
  auto first = app_node::start(*sys, opts, quiet);
  BOOST_TEST_REQUIRE(succeeded(first));
  auto taken = opts;
  taken.listen.port = first->port();
  // Publishing reuses the address (SO_REUSEADDR) but not a port someone listens on.
  auto second = app_node::start(*sys, taken, quiet);
  BOOST_TEST(fails_with(second, errc::io_failure));
  if (second) second->stop();
  first->stop();
}
