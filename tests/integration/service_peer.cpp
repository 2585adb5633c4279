// service_peer: the other process of app_node_test's remote parameter service test. Joins the
// app node at --coordinator (TROUPE_SECRET), connects to its service "params", and as client 1
// pulls, pushes the gradient 1, 2, ..., n once, and pulls again; prints "values: v0 v1 ..."
// of that last pull and exits 0, or prints the error and exits 1. Also checks that a service
// of another name is refused. With --blocking it does the same from main() through a
// blocking_parameter_client instead of an actor's parameter_client; with --lane, the same over
// the data lanes (the secret's), and it prints "routes: ..." (each bucket's) first.
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "troupe/app_node.hpp"
#include "troupe/blocking_parameter_client.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"
#include "troupe/parameter_service.hpp"

using namespace troupe;

namespace {

int failed(const std::string& what, const caf::error& err) {
  std::printf("%s: %s\n", what.c_str(), describe(err).c_str());
  return 1;
}

int print_values(const std::vector<float>& values) {
  std::printf("values:");
  for (float v : values) std::printf(" %g", v);
  std::printf("\n");
  return 0;
}

}  // namespace

// Pulls, pushes 1, 2, ..., n and pulls again, as plain calls from main().
caf::expected<std::vector<float>> pull_push_pull(caf::actor_system& sys,
                                                 const parameter_service& service) {
  auto client = blocking_parameter_client::open(sys, service, 1);
  if (!client) return std::move(client.error());
  auto first = client->pull();
  if (!first) return std::move(first.error());
  std::vector<float> grad(client->size());
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = float(i + 1);
  if (auto pushed = client->push(grad, *first); !pushed) return std::move(pushed.error());
  auto second = client->pull();
  if (!second) return std::move(second.error());
  std::printf("routes:");
  for (const auto& route : client->routes()) std::printf(" %s", route.c_str());
  std::printf("\n");
  return second->values;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes: a test that kills us sees
                                             // how far we got
  const std::string mode = argc == 4 ? argv[3] : "";
  const bool over_lanes = mode == "--lane";
  const bool blocking = mode == "--blocking" || over_lanes;
  if ((argc != 3 && !blocking) || std::string{argv[1]} != "--coordinator") return 2;
  launch_options opts;
  auto address = parse_host_port(argv[2]);
  const char* secret = std::getenv("TROUPE_SECRET");
  if (!address || !secret) return 2;
  opts.coordinators = {*address};
  opts.secret = secret;
  opts.threads = 2;
  opts.join_timeout = std::chrono::seconds(10);
  opts.name = "service-peer";
  caf::actor_system_config cfg;
  configure_actor_system(cfg, opts);
  caf::actor_system sys{cfg};
  const logger log{"service-peer", log_level::warn};
  auto node = app_node::join(sys, opts, log);
  if (!node) return failed("join", node.error());
  std::printf("joined the node\n");
  const auto timeout = std::chrono::milliseconds(10000);
  auto wrong = parameter_service::connect(sys, *node, "no-such-service", timeout);
  if (wrong) {
    std::printf("connect to no-such-service: it was found\n");
    return 1;
  }
  const lane_access lane{address->host, over_lanes ? opts.secret : ""};
  auto service = parameter_service::connect(sys, *node, "params", timeout, lane);
  if (!service) return failed("connect", service.error());
  std::printf("connected to params\n");
  if (blocking) {
    auto values = pull_push_pull(sys, *service);
    if (!values) return failed("blocking pull and push", values.error());
    return print_values(*values);
  }
  auto client = service->client(1);
  if (!client) return failed("client", client.error());
  std::promise<caf::expected<std::vector<float>>> result;
  sys.spawn([&, c = *client](caf::event_based_actor* self) -> caf::behavior {
    auto finish = [&result, self](caf::expected<std::vector<float>> x) {
      result.set_value(std::move(x));
      self->quit();
    };
    c.pull(self, [=](caf::expected<parameter_snapshot> first) {
      if (!first) return finish(std::move(first.error()));
      std::vector<float> grad(c.size());
      for (size_t i = 0; i < grad.size(); ++i) grad[i] = float(i + 1);
      c.push(self, grad, *first, [=](caf::expected<push_outcome> pushed) {
        if (!pushed) return finish(std::move(pushed.error()));
        c.pull(self, [=](caf::expected<parameter_snapshot> second) {
          if (!second) return finish(std::move(second.error()));
          finish(second->values);
        });
      });
    });
    return {[](int) {}};  // answers nothing: it lives for the requests above
  });
  auto values = result.get_future().get();
  if (!values) return failed("pull and push", values.error());
  return print_values(*values);
}
