// app_node with real actors and a real console handshake on loopback: a console that knows
// the secret reads the tree of the supervisors an app showed (children, kinds, restarts) and
// its node; one that does not is refused, as is a node of another wire schema version; the job
// views and commands say there is no job; a parameter service the node serves is pulled and
// pushed by another process (service_peer).
#define BOOST_TEST_MODULE app_node
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <future>

#include "actors/supervision/supervisors/supervisor.hpp"
#include "messages/codec.hpp"
#include "messages/protocol.hpp"
#include "tests/integration/child_process.hpp"
#include "tests/support/console_view.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/app_node.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/node.hpp"
#include "troupe/parameter_service.hpp"
#include "troupe/supervision.hpp"

using namespace troupe;
using troupe::testing::child_process;
using troupe::testing::console_view;
using troupe::testing::fails_with;
using troupe::testing::is_error;
using troupe::testing::scratch;
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

  // The peer's output; `mode`: "" or "--blocking".
  std::string peer_pulls_and_pushes(const std::string& mode);

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
    console.coordinators = {{"127.0.0.1", port}};
    console.secret = secret;
    return console_view(*sys, console, name, quiet);
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
  testing::await(  // until the restart shows
      [&] {
        auto t = view(node->port(), opts.secret, "tree");
        if (t) tree = *t;
        return has_row(tree, {"    beta", "tester", "test-app", "live", "1"});
      },
      std::chrono::seconds(10));
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

// The serving side: a service of 6 values in 2 buckets (sgd, lr 0.5) that the peer (client 1)
// pulls and pushes gradient 1..6 into from its own process, from an actor, from main()
// (--blocking);
// then client 0 here reads the step.
std::string fixture::peer_pulls_and_pushes(const std::string& mode) {
  parameter_service_config config;
  config.tensors = {{"w", {3, 2}}};
  config.initial = {1, 1, 1, 1, 1, 1};
  config.optimizer.type = optimizer_config::kind::sgd;
  config.optimizer.lr = 0.5f;
  config.buckets = 2;
  config.clients = 2;
  config.log = quiet;
  auto service = parameter_service::start(*sys, config);
  BOOST_TEST_REQUIRE(succeeded(service));
  auto node = app_node::start(*sys, opts, quiet);
  BOOST_TEST_REQUIRE(succeeded(node));
  node->serve("params", *service);
  std::vector<std::string> args{SERVICE_PEER_BIN, "--coordinator",
                                "127.0.0.1:" + std::to_string(node->port())};
  if (!mode.empty()) args.push_back(mode);
  child_process peer(args, scratch("service-peer" + mode + ".log").string(),
                     {"TROUPE_SECRET=" + opts.secret});
  const auto code = peer.wait(std::chrono::seconds(60));
  BOOST_TEST_INFO("peer: " << peer.output());
  BOOST_TEST_REQUIRE(code.value_or(-1) == 0);
  BOOST_TEST(peer.output().find("values: 0.5 0 -0.5 -1 -1.5 -2") != std::string::npos);
  // The update landed in this process's buckets.
  auto local = service->client(0);
  BOOST_TEST_REQUIRE(succeeded(local));
  std::promise<caf::expected<parameter_snapshot>> read;
  sys->spawn([&, c = *local](caf::event_based_actor* self) -> caf::behavior {
    c.pull(self, [&read, self](caf::expected<parameter_snapshot> s) {
      read.set_value(std::move(s));
      self->quit();
    });
    return {[](int) {}};
  });
  auto snapshot = read.get_future().get();
  BOOST_TEST_REQUIRE(succeeded(snapshot));
  const std::vector<float> expected = {0.5f, 0.0f, -0.5f, -1.0f, -1.5f, -2.0f};
  BOOST_TEST(snapshot->values == expected, boost::test_tools::per_element());
  node->stop();
  service->stop();
  return peer.output();
}

BOOST_FIXTURE_TEST_CASE(another_process_pulls_and_pushes_a_served_service, fixture) {
  peer_pulls_and_pushes("");
}

BOOST_FIXTURE_TEST_CASE(another_process_pulls_and_pushes_through_the_blocking_client, fixture) {
  peer_pulls_and_pushes("--blocking");
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
