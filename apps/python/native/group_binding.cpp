#include "group_binding.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "process_runtime.hpp"
#include "troupe/app_node.hpp"
#include "troupe/error.hpp"
#include "troupe/loop_group.hpp"
#include "troupe/options.hpp"

namespace py = pybind11;

namespace troupe::python {

namespace {

collective_kind collective_named(const std::string& name) {
  for (auto k : {collective_kind::gloo, collective_kind::actors})
    if (name == to_string(k)) return k;
  throw py::value_error("collective: gloo or actors, not '" + name + "'");
}

// The options of this process's system with `listen`/`coordinator` and `secret` set.
launch_options options_with(const std::string& address, bool listening, const std::string& secret) {
  launch_options opts = process_options();
  auto at = parse_host_port(address);
  if (!at) raise_error(at.error(), "the group's address");
  if (listening)
    opts.listen = *at;
  else
    opts.coordinators = {*at};
  if (!secret.empty()) opts.secret = secret;
  return opts;
}

class group_binding {
 public:
  group_binding(const std::string& listen, const std::string& secret, const std::string& name,
                uint32_t min_members, const std::string& collective, double timeout_s,
                double settle_s) {
    auto& sys = process_system();
    auto opts = options_with(listen, true, secret);
    loop_group_config config;
    config.min_members = std::max<uint32_t>(min_members, 1);
    config.collective = collective_named(collective);
    config.timeout = millis(timeout_s, "timeout");
    config.settle = millis(settle_s, "settle");
    config.log = logger{"group " + name, opts.level};
    auto node = app_node::start(sys, opts, logger{"app-node", opts.level});
    if (!node) raise_error(node.error(), "serving the loop group");
    group_ = spawn_loop_group(sys, config);
    node->serve_group(name, group_);
    address_ = fmt::format("{}:{}", opts.listen.host, node->port());
    node_ = std::move(*node);
  }
  ~group_binding() { stop(); }

  std::string address() const { return address_; }

  void stop() {
    if (node_) node_->stop();
    if (group_) caf::anon_send_exit(group_, caf::exit_reason::user_shutdown);
    node_.reset();
    group_ = caf::actor{};
  }

 private:
  std::optional<app_node> node_;
  caf::actor group_;
  std::string address_;
  std::shared_ptr<void> stops_ = before_stop([this] { stop(); });
};

// A reduction in flight: its own copy of the values, written back to `target` by wait().
class pending_reduce {
 public:
  pending_reduce(std::future<caf::expected<reduce_done>> f, std::shared_ptr<std::vector<float>> v,
                 py::array_t<float> target)
      : future_(std::move(f)), values_(std::move(v)), target_(std::move(target)) {}

  // Seconds in the collective; the sum is in the array given. errc errors as Python's.
  double wait(double timeout_s) {
    if (!future_.valid()) throw py::value_error("this reduction was waited for already");
    const auto done = wait_answer(future_, millis(timeout_s, "timeout"), "reducing a bucket");
    std::copy(values_->begin(), values_->end(), target_.mutable_data());
    return done.seconds;
  }

 private:
  std::future<caf::expected<reduce_done>> future_;
  std::shared_ptr<std::vector<float>> values_;
  py::array_t<float> target_;
};

class member_binding {
 public:
  static std::shared_ptr<member_binding> join(const std::string& address, const std::string& secret,
                                              const std::string& group, const std::string& name,
                                              const std::string& host, const std::string& bind,
                                              double timeout_s) {
    auto& sys = process_system();
    auto opts = options_with(address, false, secret);
    const auto timeout = millis(timeout_s, "timeout");
    opts.join_timeout = std::chrono::ceil<std::chrono::seconds>(timeout);
    opts.name = name;
    const logger log{"member " + name, opts.level};
    caf::expected<std::unique_ptr<loop_member>> member = make_error(errc::timeout, "no group");
    {
      py::gil_scoped_release released;  // joining may take the whole timeout
      member = join_group(sys, opts, group, name, host, bind, timeout, log);
    }
    if (!member) raise_error(member.error(), "joining loop group '" + group + "' at " + address);
    return std::make_shared<member_binding>(std::move(*member));
  }

  explicit member_binding(std::unique_ptr<loop_member> m) : member_(std::move(m)) {}

  std::tuple<uint64_t, uint32_t, uint32_t> generation(uint64_t after, double timeout_s) {
    caf::expected<loop_generation> g = make_error(errc::timeout, "no generation");
    const bool answered = wait_releasing_gil(
        [&](std::chrono::milliseconds slice) {
          g = member().generation(after, slice);
          return g || !has_code(g.error(), errc::timeout);
        },
        millis(timeout_s, "timeout"));
    if (!answered || !g) raise_error(g.error(), "waiting for a generation of the loop group");
    return {g->generation, g->rank, g->size};
  }

  std::shared_ptr<pending_reduce> reduce(uint64_t generation, py::array_t<float> values,
                                         uint32_t tag) {
    if (values.ndim() != 1) throw py::value_error("reduce: a 1-D float32 array");
    auto copy = std::make_shared<std::vector<float>>(values.data(), values.data() + values.size());
    auto f = member().reduce(generation, std::span<float>{*copy}, tag, copy);
    return std::make_shared<pending_reduce>(std::move(f), copy, std::move(values));
  }

  // (steps, source, state): the state is the source's bytes when this member took them, None
  // when it keeps its own (it had as many steps as the source).
  std::tuple<uint64_t, uint32_t, py::object> sync(uint64_t generation, uint64_t steps,
                                                  const py::bytes& state, double timeout_s) {
    char* data = nullptr;
    ssize_t size = 0;
    if (PyBytes_AsStringAndSize(state.ptr(), &data, &size) != 0) throw py::error_already_set();
    auto f = member().sync(generation, steps, std::vector<char>(data, data + size));
    const bool ready = wait_releasing_gil(
        [&](std::chrono::milliseconds slice) {
          return f.wait_for(slice) == std::future_status::ready;
        },
        millis(timeout_s, "timeout"));
    if (!ready)
      raise_error(make_error(errc::timeout, "no agreement in time"), "agreeing on a state");
    auto agreed = f.get();
    if (!agreed) raise_error(agreed.error(), "agreeing on a state");
    if (!agreed->taken) return {agreed->steps, agreed->source, py::none()};
    return {agreed->steps, agreed->source, py::bytes(agreed->state.data(), agreed->state.size())};
  }

  void leave() {
    if (member_) member_->leave();
  }
  // At exit: leaves, and lets go of the member before the system goes.
  void close() {
    py::gil_scoped_release unlocked;
    if (member_) member_->leave();
    member_.reset();
  }

 private:
  loop_member& member() {
    if (!member_) throw py::value_error("this loop member has left (the process exits)");
    return *member_;
  }
  static caf::expected<std::unique_ptr<loop_member>> join_group(
      caf::actor_system& sys, const launch_options& opts, const std::string& group,
      const std::string& name, const std::string& host, const std::string& bind,
      std::chrono::milliseconds timeout, const logger& log) {
    auto node = app_node::join(sys, opts, log);
    if (!node) return std::move(node.error());
    return loop_member::join(sys, *node, group, name, host, bind, timeout, log);
  }

  std::unique_ptr<loop_member> member_;
  std::shared_ptr<void> closes_ = before_stop([this] { close(); });
};

}  // namespace

void bind_groups(py::module_& m) {
  py::class_<group_binding>(m, "GroupService")
      .def(py::init<std::string, std::string, std::string, uint32_t, std::string, double, double>(),
           py::arg("listen"), py::arg("secret"), py::arg("name"), py::arg("min_members"),
           py::arg("collective"), py::arg("timeout"), py::arg("settle"))
      .def_property_readonly("address", &group_binding::address)
      .def("stop", &group_binding::stop);
  py::class_<pending_reduce, std::shared_ptr<pending_reduce>>(m, "PendingReduce")
      .def("wait", &pending_reduce::wait, py::arg("timeout"));
  py::class_<member_binding, std::shared_ptr<member_binding>>(m, "LoopMember")
      .def_static("join", &member_binding::join, py::arg("address"), py::arg("secret"),
                  py::arg("group"), py::arg("name"), py::arg("host"), py::arg("bind"),
                  py::arg("timeout"))
      .def("generation", &member_binding::generation, py::arg("after"), py::arg("timeout"))
      .def("reduce", &member_binding::reduce, py::arg("generation"), py::arg("values"),
           py::arg("tag"))
      .def("sync", &member_binding::sync, py::arg("generation"), py::arg("steps"), py::arg("state"),
           py::arg("timeout"))
      .def("leave", &member_binding::leave);
}

}  // namespace troupe::python
