// An app's parameter service on server nodes (parameter_service::start with an app_node):
// three real server processes (troupe-fmnist --role server), started first, join the app node, hold
// every bucket twice (--replication 2), and this process's blocking client pulls and pushes over
// their data lanes. One server is killed with a push in flight: the backups take over, the
// client finds them through the service's coordinator and goes on, and every push is applied
// exactly once (plain SGD at lr 1 with gradients of ones: each value is minus the pushes).
// Then another process (service_peer) connects through the app node and pushes over the lanes.
// The console sees its servers and buckets through the node. Also: what such a service refuses
// to start with.
#define BOOST_TEST_MODULE service_failover
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/child_process.hpp"
#include "tests/support/console_view.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/app_node.hpp"
#include "troupe/blocking_parameter_client.hpp"
#include "troupe/node.hpp"
#include "troupe/parameter_service.hpp"

using namespace troupe;
using troupe::testing::child_process;
using troupe::testing::console_view;
using troupe::testing::fails_with;
using troupe::testing::scratch;
using troupe::testing::succeeded;

namespace {

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  launch_options opts;
  logger quiet{"service-failover-test", log_level::error};
  std::optional<app_node> node;

  fixture() {
    opts.threads = 2;
    opts.listen = {"127.0.0.1", 0};
    opts.secret = "service-failover-test-secret";
    opts.name = "serving-app";
    configure_actor_system(cfg, opts);
    sys = std::make_unique<caf::actor_system>(cfg);
    auto started = app_node::start(*sys, opts, quiet);
    BOOST_TEST_REQUIRE(succeeded(started));
    node = *started;
  }
  ~fixture() {
    if (node) node->stop();
  }

  // A console's view of the node, through the same handshake as troupe-console.
  caf::expected<table_view> view(const std::string& name) {
    launch_options console = opts;
    console.coordinators = {{"127.0.0.1", node->port()}};
    return console_view(*sys, console, name, quiet);
  }

  // Server node `i`, joining this app node.
  std::unique_ptr<child_process> server(int i) {
    const std::string name = "server-" + std::to_string(i);
    return std::make_unique<child_process>(
        std::vector<std::string>{TROUPE_FMNIST_BIN, "--role", "server", "--coordinator",
                                 "127.0.0.1:" + std::to_string(node->port()), "--listen",
                                 "127.0.0.1:0", "--name", name},
        scratch(name + ".log").string(), std::vector<std::string>{"TROUPE_SECRET=" + opts.secret});
  }
};

// w: 6 x 4 in three buckets (one primary on each of three servers), plain SGD at lr 1 from 0.
parameter_service_config on_servers(uint32_t servers, uint32_t replication) {
  parameter_service_config c;
  c.tensors = {{"w", {6, 4}}};
  c.optimizer.type = optimizer_config::kind::sgd;
  c.optimizer.lr = 1.0f;
  c.buckets = 3;
  c.clients = 3;  // this process's two, and service_peer's (id 1)
  c.servers = servers;
  c.replication = replication;
  c.join_timeout = std::chrono::seconds(120);
  c.log = logger{"parameters", log_level::warn};
  return c;
}

// Pulls, pushes ones, and says whether the push was applied (errors as test failures).
bool pull_and_push_ones(blocking_parameter_client& client) {
  auto read = client.pull();
  BOOST_TEST_REQUIRE(succeeded(read));
  auto pushed = client.push(std::vector<float>(client.size(), 1.0f), *read);
  BOOST_TEST_REQUIRE(succeeded(pushed));
  return true;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_killed_server_s_backups_take_over_and_each_push_lands_once, fixture) {
  std::vector<std::unique_ptr<child_process>> servers;
  for (int i = 0; i < 3; ++i) servers.push_back(server(i));
  // Servers that come before the service wait for it (they are told to try again).
  BOOST_TEST_REQUIRE(servers[0]->wait_for_output("no parameter service waits for servers"));
  auto service = parameter_service::start(*sys, *node, on_servers(3, 2));
  BOOST_TEST_REQUIRE(succeeded(service));
  BOOST_TEST(!service->supervisor());  // each server supervises its own buckets
  auto client = blocking_parameter_client::open(*sys, *service, 0);
  BOOST_TEST_REQUIRE(succeeded(client));

  uint64_t pushes = 0;
  for (; pushes < 4; ++pushes) pull_and_push_ones(*client);
  for (const auto& route : client->routes()) BOOST_TEST(route == "lane");

  // A push in flight when its server dies: sent again to the backup that took over, which
  // applies it once (it may already hold it, forwarded before the primary died).
  auto read = client->pull();
  BOOST_TEST_REQUIRE(succeeded(read));
  auto in_flight = client->push_async(std::vector<float>(client->size(), 1.0f), *read);
  servers[0]->kill();
  auto landed = blocking_parameter_client::wait(in_flight, std::chrono::seconds(60));
  BOOST_TEST_REQUIRE(succeeded(landed));
  ++pushes;
  for (; pushes < 10; ++pushes) pull_and_push_ones(*client);

  auto last = client->pull();
  BOOST_TEST_REQUIRE(succeeded(last));
  const std::vector<float> expected(24, -float(pushes));
  BOOST_TEST(last->values == expected, boost::test_tools::per_element());
  for (const auto& route : client->routes()) BOOST_TEST(route == "lane");
  // A client opened after the failover starts from the buckets as they are now.
  auto late = blocking_parameter_client::open(*sys, *service, 2);
  BOOST_TEST_REQUIRE(succeeded(late));
  auto late_read = late->pull();
  BOOST_TEST_REQUIRE(succeeded(late_read));
  BOOST_TEST(late_read->values == expected, boost::test_tools::per_element());

  // The console sees the service's servers through the node, the killed one lost, and every
  // bucket's primary on a live one.
  auto nodes = view("nodes");
  BOOST_TEST_REQUIRE(succeeded(nodes));
  size_t servers_listed = 0, lost = 0;
  for (const auto& row : nodes->rows) {
    servers_listed += row[0] == "server";
    lost += row[0] == "server" && row[3] == "lost";
  }
  BOOST_TEST(nodes->rows.front()[0] == "app");
  BOOST_TEST(servers_listed == 3u);
  BOOST_TEST(lost == 1u);
  auto buckets = view("buckets");
  BOOST_TEST_REQUIRE(succeeded(buckets));
  BOOST_TEST_REQUIRE(buckets->rows.size() == 3u);
  for (const auto& row : buckets->rows) BOOST_TEST(row[1] != "server-0");

  // Another process, through the app node: client 1 finds the buckets as they are now (the
  // backups that took over) on the servers, and pushes 1, 2, ..., 24 over their lanes.
  node->serve("params", *service);
  child_process peer(
      {SERVICE_PEER_BIN, "--coordinator", "127.0.0.1:" + std::to_string(node->port()), "--lane"},
      scratch("service-peer.log").string(), {"TROUPE_SECRET=" + opts.secret});
  BOOST_TEST_INFO("peer: " << peer.output());
  BOOST_TEST_REQUIRE(peer.wait(std::chrono::seconds(120)).value_or(-1) == 0);
  BOOST_TEST(peer.output().find("routes: lane lane lane") != std::string::npos);
  std::string values = "values:";
  for (int i = 0; i < 24; ++i) values += " " + std::to_string(-int(pushes) - (i + 1));
  BOOST_TEST(peer.output().find(values) != std::string::npos);

  service->stop();  // the surviving servers are stopped by the service's coordinator
  for (int i = 1; i < 3; ++i) {
    const auto code = servers[i]->wait(std::chrono::seconds(60));
    BOOST_TEST_INFO("server-" << i << ": " << servers[i]->output());
    BOOST_TEST(code.value_or(-1) == 0);
  }
}

BOOST_FIXTURE_TEST_CASE(a_service_on_servers_refuses_what_it_cannot_place, fixture) {
  BOOST_TEST(
      fails_with(parameter_service::start(*sys, *node, on_servers(2, 3)), errc::bad_configuration));
  BOOST_TEST(
      fails_with(parameter_service::start(*sys, *node, on_servers(2, 0)), errc::bad_configuration));
  // Without its app node there is nobody for servers to join.
  BOOST_TEST(fails_with(parameter_service::start(*sys, on_servers(2, 1)), errc::bad_configuration));
  // No server runs: the wait for one has its bound, and the node's servers are free after.
  auto nobody = on_servers(1, 1);
  nobody.join_timeout = std::chrono::milliseconds(500);
  BOOST_TEST(fails_with(parameter_service::start(*sys, *node, nobody), errc::timeout));
  auto late = server(0);
  auto service = parameter_service::start(*sys, *node, on_servers(1, 1));
  BOOST_TEST_REQUIRE(succeeded(service));
  service->stop();
  BOOST_TEST(late->wait(std::chrono::seconds(60)).value_or(-1) == 0);
}

BOOST_FIXTURE_TEST_CASE(one_service_on_servers_per_node, fixture) {
  auto first = server(0);
  auto service = parameter_service::start(*sys, *node, on_servers(1, 1));
  BOOST_TEST_REQUIRE(succeeded(service));
  BOOST_TEST(
      fails_with(parameter_service::start(*sys, *node, on_servers(1, 1)), errc::bad_configuration));
  service->stop();
  BOOST_TEST(first->wait(std::chrono::seconds(60)).value_or(-1) == 0);
}
