#include "process_runtime.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include <pybind11/pybind11.h>

#include "troupe/error.hpp"
#include "troupe/node.hpp"

namespace py = pybind11;

namespace troupe::python {

namespace {

struct process_runtime {
  launch_options opts;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  pid_t owner = 0;
};

process_runtime*& current() {
  static process_runtime* runtime = nullptr;
  return runtime;
}

std::vector<std::weak_ptr<std::function<void()>>>& stop_hooks() {
  static std::vector<std::weak_ptr<std::function<void()>>> hooks;
  return hooks;
}

}  // namespace

caf::actor_system& process_system() {
  auto*& runtime = current();
  if (runtime && runtime->owner == ::getpid()) return *runtime->sys;
  // A forked child's copy of its parent's system is not its own: it starts its own and leaves
  // the parent's copy as it is (never stopped here).
  auto opts = parse_launch_options({}, process_environment());
  if (!opts) raise_error(opts.error(), "reading TROUPE_* for this process's actor system");
  auto fresh = new process_runtime;
  fresh->opts = std::move(*opts);
  configure_actor_system(fresh->cfg, fresh->opts);
  fresh->sys = std::make_unique<caf::actor_system>(fresh->cfg);
  fresh->owner = ::getpid();
  runtime = fresh;
  return *runtime->sys;
}

const launch_options& process_options() {
  process_system();
  return current()->opts;
}

std::shared_ptr<void> before_stop(std::function<void()> stop) {
  auto hook = std::make_shared<std::function<void()>>(std::move(stop));
  auto& hooks = stop_hooks();
  std::erase_if(hooks, [](const auto& h) { return h.expired(); });
  hooks.push_back(hook);
  return hook;
}

void stop_process_system() {
  constexpr auto bound = std::chrono::seconds(10);
  auto*& runtime = current();
  if (!runtime || runtime->owner != ::getpid()) return;
  auto hooks = std::move(stop_hooks());
  stop_hooks().clear();
  for (auto& weak : hooks)
    if (auto stop = weak.lock()) (*stop)();
  py::gil_scoped_release released;  // actors that call back into Python may still finish
  auto* ending = runtime;
  runtime = nullptr;
  if (!end_actor_system_within([ending] { delete ending; }, bound))
    fmt::print(stderr, "troupe: the actor system did not shut down within {} s; leaving it\n",
               bound.count());
}

bool wait_releasing_gil(const std::function<bool(std::chrono::milliseconds)>& ready,
                        std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  constexpr auto slice = std::chrono::milliseconds(100);
  for (;;) {
    bool done = false;
    {
      py::gil_scoped_release released;
      done = ready(slice);
    }
    if (done) return true;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

std::chrono::milliseconds millis(double seconds, const char* what) {
  if (!(seconds > 0)) {
    const std::string text = std::string{what} + ": a positive number of seconds";
    PyErr_SetString(PyExc_ValueError, text.c_str());
    throw py::error_already_set();
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

void raise_error(const caf::error& err, const std::string& doing) {
  const std::string text = doing + ": " + describe(err);
  PyObject* type = PyExc_RuntimeError;
  if (has_code(err, errc::timeout))
    type = PyExc_TimeoutError;
  else if (has_code(err, errc::shape_mismatch) || has_code(err, errc::non_finite) ||
           has_code(err, errc::bad_configuration) || has_code(err, errc::malformed_message))
    type = PyExc_ValueError;
  else if (has_code(err, errc::authentication_failed))
    type = PyExc_PermissionError;
  PyErr_SetString(type, text.c_str());
  throw py::error_already_set();
}

}  // namespace troupe::python
