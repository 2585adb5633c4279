// Codec for what an app's own actors exchange with an app_node: the directory of a parameter
// service (troupe/parameter_service.hpp's connect).
#include "messages/codec_detail.hpp"

namespace troupe {

using detail::decode_budget;

wire encode(const service_directory& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::ServiceDirectory>();
  auto tensors = out.initTensors(static_cast<unsigned>(x.tensors.size()));
  for (unsigned i = 0; i < x.tensors.size(); ++i) {
    tensors[i].setName(x.tensors[i].name);
    detail::write_shape(tensors[i].initShape(x.tensors[i].shape.size()), x.tensors[i].shape);
  }
  detail::write_placement(out.initPlan(), x.plan);
  out.setClients(x.clients);
  out.setTimeoutMs(x.timeout_ms);
  detail::write_tables(out.initTables(x.tables.size()), x.tables);
  out.setLanePort(x.lane);
  out.setServers(x.servers);
  return detail::to_wire(message);
}

template <>
caf::expected<service_directory> decode<service_directory>(const wire& w,
                                                           const codec_limits& limits) {
  return detail::read_root<schema::ServiceDirectory, service_directory>(
      w, limits,
      [](schema::ServiceDirectory::Reader in,
         decode_budget& budget) -> caf::expected<service_directory> {
        service_directory x;
        if (in.getTensors().size() == 0 || in.getTensors().size() > budget.limits.max_tensors)
          return make_error(errc::malformed_message, "service directory: no or too many tensors");
        for (auto t : in.getTensors()) {
          auto name = detail::read_text(t.getName(), budget, "tensor name");
          if (!name) return std::move(name.error());
          auto shape = detail::read_shape(t.getShape(), budget);
          if (!shape) return std::move(shape.error());
          x.tensors.push_back(named_shape{std::move(*name), std::move(*shape)});
        }
        auto plan = detail::read_placement(in.getPlan(), budget);
        if (!plan) return std::move(plan.error());
        if (plan->buckets.empty())
          return make_error(errc::malformed_message, "service directory: no buckets");
        x.plan = std::move(*plan);
        x.clients = in.getClients();
        x.timeout_ms = in.getTimeoutMs();
        if (x.clients == 0 || x.timeout_ms == 0 || x.timeout_ms > 3'600'000)
          return make_error(errc::malformed_message,
                            "service directory: no clients, or a timeout out of range");
        auto tables = detail::read_tables(in.getTables(), budget);
        if (!tables) return std::move(tables.error());
        x.tables = std::move(*tables);
        x.lane = in.getLanePort();
        auto servers = detail::read_text(in.getServers(), budget, "server list");
        if (!servers) return std::move(servers.error());
        x.servers = std::move(*servers);
        return x;
      });
}

}  // namespace troupe
