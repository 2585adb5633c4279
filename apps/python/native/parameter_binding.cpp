#include "parameter_binding.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <optional>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "float_buffer.hpp"
#include "process_runtime.hpp"
#include "troupe/app_node.hpp"
#include "troupe/blocking_parameter_client.hpp"
#include "troupe/error.hpp"
#include "troupe/options.hpp"

namespace py = pybind11;

namespace troupe::python {

namespace {

using shape = std::vector<uint32_t>;

// A contiguous 1-D float32 buffer of `n` values, read only.
std::span<const float> floats(const py::buffer& b, size_t n, const char* what) {
  return float_buffer(b, n, what, false);
}

// A pull: the values (lent to numpy as they are) and what a push computed from them needs.
struct snapshot_binding {
  parameter_snapshot snapshot;
};

class client_binding {
 public:
  client_binding(blocking_parameter_client client, std::vector<tensor_spec> tensors)
      : client_(std::move(client)), tensors_(std::move(tensors)) {}

  std::vector<std::pair<std::string, shape>> tensors() const {
    std::vector<std::pair<std::string, shape>> out;
    for (const auto& t : tensors_) out.emplace_back(t.name, t.shape);
    return out;
  }
  uint32_t id() const { return client().id(); }
  size_t size() const { return client().size(); }
  uint64_t pushes() const { return client().pushes(); }
  double timeout() const { return client().timeout().count() / 1000.0; }
  std::vector<std::string> routes() { return client().routes(); }

  std::shared_ptr<snapshot_binding> pull(std::optional<double> bound) {
    auto f = client().pull_async();
    return std::make_shared<snapshot_binding>(
        snapshot_binding{wait_answer(f, bound_of(bound), "pulling the parameters")});
  }

  uint64_t push(py::buffer grad, const snapshot_binding& read,
                std::optional<std::tuple<uint32_t, uint64_t, uint32_t>> batches,
                std::optional<double> bound) {
    const auto values = floats(grad, client().size(), "the gradient");
    std::optional<batch_range> named;
    if (batches)
      named = batch_range{std::get<0>(*batches), std::get<1>(*batches), std::get<2>(*batches)};
    auto f = client().push_async(values, read.snapshot, {}, named);  // copied before it returns
    return wait_answer(f, bound_of(bound), "pushing the gradient").staleness;
  }

 private:
  const blocking_parameter_client& client() const {
    if (!client_) throw py::value_error("the parameter client has closed (the process exits)");
    return *client_;
  }
  blocking_parameter_client& client() {
    return const_cast<blocking_parameter_client&>(std::as_const(*this).client());
  }
  std::chrono::milliseconds bound_of(std::optional<double> bound) const {
    return bound ? millis(*bound, "timeout") : 4 * client().timeout();
  }
  void close() {
    py::gil_scoped_release unlocked;  // its actor ends with it
    client_.reset();
  }

  std::optional<blocking_parameter_client> client_;
  std::vector<tensor_spec> tensors_;
  std::shared_ptr<void> closes_ = before_stop([this] { close(); });
};

std::shared_ptr<client_binding> client_of(caf::actor_system& sys, const parameter_service& service,
                                          uint32_t id) {
  auto client = blocking_parameter_client::open(sys, service, id);
  if (!client) raise_error(client.error(), "a client of the parameter service");
  return std::make_shared<client_binding>(std::move(*client), service.tensors());
}

// A client of the service `name` that the app node at `address` serves, joined with `secret`.
std::shared_ptr<client_binding> connect(const std::string& address, uint32_t id,
                                        const std::string& secret, const std::string& name,
                                        double timeout_s) {
  auto& sys = process_system();
  launch_options opts = process_options();
  auto at = parse_host_port(address);
  if (!at) raise_error(at.error(), "the service's address");
  opts.coordinators = {*at};
  if (!secret.empty()) opts.secret = secret;
  const auto timeout = millis(timeout_s, "timeout");
  opts.join_timeout = std::chrono::ceil<std::chrono::seconds>(timeout);
  opts.name = "python-client-" + std::to_string(::getpid());
  const logger log{"parameters", opts.level};
  caf::expected<parameter_service> service = make_error(errc::timeout, "not connected");
  {
    py::gil_scoped_release released;  // joining and asking may take the whole timeout
    auto node = app_node::join(sys, opts, log);
    // Over the node's data lane where it offers one, as a job's workers go.
    const lane_access lane{at->host, opts.secret};
    service = node ? parameter_service::connect(sys, *node, name, timeout, lane)
                   : caf::expected<parameter_service>{std::move(node.error())};
  }
  if (!service) raise_error(service.error(), "connecting to '" + name + "' at " + address);
  return client_of(sys, *service, id);
}

class service_binding {
 public:
  service_binding(std::vector<std::string> names, std::vector<shape> shapes, py::buffer initial,
                  uint32_t clients, std::vector<std::string> flags, std::string name, bool serve,
                  uint32_t servers, uint32_t replication)
      : sys_(process_system()) {
    if (servers > 0 && !serve)
      throw py::value_error("a service on servers needs listen= (the servers join it there)");
    if (names.size() != shapes.size()) throw py::value_error("a shape for every tensor's name");
    auto opts = parse_launch_options(flags, process_environment());
    if (!opts) raise_error(opts.error(), "the service's options");
    parameter_service_config config;
    for (size_t i = 0; i < names.size(); ++i) config.tensors.push_back({names[i], shapes[i]});
    uint64_t total = 0;  // the service checks the tensors themselves
    for (const auto& t : config.tensors) total += numel(t.shape);
    const auto values = floats(initial, total, "the initial values");
    config.initial.assign(values.begin(), values.end());
    config.optimizer = optimizer_from(*opts);
    config.consistency = opts->consistency;
    config.compensation = opts->compensation;
    config.clip = opts->clip;
    config.seed = opts->seed;
    config.buckets = std::max<uint32_t>(opts->buckets, 1);
    config.clients = clients;
    config.timeout = opts->request_timeout;
    config.name = name;
    config.log = logger{name, opts->level};
    config.servers = servers;
    config.replication = replication;
    config.join_timeout = opts->join_timeout;
    if (!serve) {
      auto started = parameter_service::start(sys_, std::move(config));
      if (!started) raise_error(started.error(), "starting the parameter service");
      service_ = std::move(*started);
      return;
    }
    // The node first (servers join it), then the service: in this process, or on its servers
    // once they joined, waited for without the GIL (at most the join timeout).
    auto node = app_node::start(sys_, *opts, logger{"app-node", opts->level});
    if (!node) raise_error(node.error(), "serving the parameter service");
    caf::expected<parameter_service> started = make_error(errc::timeout, "not started");
    {
      py::gil_scoped_release unlocked;
      started = parameter_service::start(sys_, *node, std::move(config));
    }
    if (!started) {
      node->stop();
      raise_error(started.error(), "starting the parameter service");
    }
    service_ = std::move(*started);
    node->serve(name, *service_);
    address_ = fmt::format("{}:{}", opts->listen.host, node->port());
    node_ = std::move(*node);
  }

  ~service_binding() { stop(); }

  std::string address() const { return address_; }

  std::shared_ptr<client_binding> client(uint32_t id) {
    if (!service_) throw py::value_error("the parameter service has stopped");
    return client_of(sys_, *service_, id);
  }

  void stop() {
    py::gil_scoped_release unlocked;  // a service on servers waits for its coordinator to end
    if (node_) node_->stop();
    if (service_) service_->stop();
    node_.reset();
    service_.reset();
  }

 private:
  caf::actor_system& sys_;
  std::optional<parameter_service> service_;
  std::optional<app_node> node_;
  std::string address_;
  std::shared_ptr<void> stops_ = before_stop([this] { stop(); });
};

}  // namespace

void bind_parameters(py::module_& m) {
  py::class_<snapshot_binding, std::shared_ptr<snapshot_binding>>(m, "Snapshot")
      .def_property_readonly("values",
                             [](py::object self) {
                               auto& s = self.cast<snapshot_binding&>().snapshot;
                               return py::array_t<float>({s.values.size()}, {sizeof(float)},
                                                         s.values.data(), self);
                             })
      .def_property_readonly("clocks", [](const snapshot_binding& s) {
        std::vector<std::vector<uint64_t>> out;
        for (const auto& c : s.snapshot.clocks)
          out.emplace_back(c.entries().begin(), c.entries().end());
        return out;
      });
  py::class_<client_binding, std::shared_ptr<client_binding>>(m, "ParameterClient")
      .def_static("connect", &connect, py::arg("address"), py::arg("client"), py::arg("secret"),
                  py::arg("service"), py::arg("timeout"))
      .def_property_readonly("tensors", &client_binding::tensors)
      .def_property_readonly("id", &client_binding::id)
      .def_property_readonly("size", &client_binding::size)
      .def_property_readonly("pushes", &client_binding::pushes)
      .def_property_readonly("timeout", &client_binding::timeout)
      .def_property_readonly("routes", &client_binding::routes)
      .def("pull", &client_binding::pull, py::arg("timeout") = py::none())
      .def("push", &client_binding::push, py::arg("grad"), py::arg("read"),
           py::arg("batches") = py::none(), py::arg("timeout") = py::none());
  py::class_<service_binding>(m, "ParameterService")
      .def(py::init<std::vector<std::string>, std::vector<shape>, py::buffer, uint32_t,
                    std::vector<std::string>, std::string, bool, uint32_t, uint32_t>(),
           py::arg("names"), py::arg("shapes"), py::arg("initial"), py::arg("clients"),
           py::arg("flags"), py::arg("name"), py::arg("serve"), py::arg("servers") = 0,
           py::arg("replication") = 1)
      .def_property_readonly("address", &service_binding::address)
      .def("client", &service_binding::client, py::arg("id"))
      .def("stop", &service_binding::stop);
  m.def("stop_runtime", &stop_process_system);
}

}  // namespace troupe::python
