#include "actors/launch/dashboard_state.hpp"

#include <caf/scoped_actor.hpp>

#include <vector>

#include "messages/codec.hpp"
#include "messages/json.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// The views each kind of coordinator has (the console's).
const std::vector<std::string> ps_views = {"nodes",   "tree",  "workers",
                                           "buckets", "curve", "timeline"};
const std::vector<std::string> dp_views = {"nodes", "tree", "group", "timeline"};

uint64_t unix_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string dashboard_state(caf::actor_system& sys, const coordinator_actor& coordinator,
                            const std::string& mode, std::chrono::milliseconds bound) {
  json out{{"mode", mode}, {"at_unix_ms", unix_ms()}};
  json& shown = out["views"] = json::object();
  json& errors = out["errors"] = json::object();
  caf::scoped_actor self{sys};
  const bool servers_hold_the_model = mode == "ps" || mode == "diloco";
  for (const auto& name : servers_hold_the_model ? ps_views : dp_views) {
    self->request(coordinator, bound, inspect_atom_v, name)
        .receive(
            [&](const wire& w) {
              auto table = decode<table_view>(w);
              if (!table) {
                errors[name] = describe(table.error());
                return;
              }
              shown[name] = json{{"columns", table->columns}, {"rows", table->rows}};
            },
            [&](caf::error& err) { errors[name] = describe(err); });
  }
  return to_text(out, -1);
}

caf::expected<std::unique_ptr<dashboard_endpoint>> start_dashboard(
    caf::actor_system& sys, const launch_options& opts, const coordinator_actor& coordinator,
    const logger& log) {
  if (opts.dashboard_port < 0) return std::unique_ptr<dashboard_endpoint>{};
  const host_port where{opts.listen.host, static_cast<uint16_t>(opts.dashboard_port)};
  const std::string mode = to_string(opts.mode);
  // Views that gather from every node wait for them: a bound below the request timeout.
  const auto bound =
      std::min<std::chrono::milliseconds>(opts.request_timeout, std::chrono::seconds(5));
  auto served = dashboard_endpoint::start(
      [&sys, coordinator, mode, bound] { return dashboard_state(sys, coordinator, mode, bound); },
      where, opts.tls_dir);
  if (!served) return std::move(served.error());
  log.info("dashboard at {}://{}:{}/", opts.tls_dir.empty() ? "http" : "https", where.host,
           (*served)->port());
  return served;
}

}  // namespace troupe
