// troupe._native: the Python extension under the troupe package (apps/python/troupe).
// run(build, argv, prog, flags, defaults) is run_app (troupe/app.hpp) with a task built in
// Python: the same flags, roles, modes and faults as troupe-fmnist; common_flags and
// check_flag let troupe.run check keyword options before anything starts. Beside it: DASH's kernels
// (dash_binding), the parameter service and its blocking clients (parameter_binding), and
// loop groups for a loop's own data parallelism (group_binding).
// Python code calls the troupe package, not this.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "dash_binding.hpp"
#include "group_binding.hpp"
#include "parameter_binding.hpp"
#include "table_binding.hpp"
#include "python_task.hpp"
#include "troupe/app.hpp"
#include "troupe/error.hpp"

namespace py = pybind11;

namespace {

// How long run() waits for Python's lock after its job ended (the launchers' exit bound).
constexpr auto return_bound = std::chrono::seconds(10);

// SIGINT as a Troupe binary has it while the job runs (Python's handler only sets a flag that
// nobody reads while run_app holds the main thread): the default action, and while run_app
// waits for its job, the first Ctrl-C stops the job (actors/launch/stop_signals.hpp). Python's
// handler, with its flags, again afterwards. An ignored SIGINT (nohup) stays ignored.
class default_sigint {
 public:
  default_sigint() {
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    ::sigaction(SIGINT, nullptr, &previous_);
    if (previous_.sa_handler != SIG_IGN) changed_ = ::sigaction(SIGINT, &fallback, nullptr) == 0;
  }
  ~default_sigint() {
    if (changed_) ::sigaction(SIGINT, &previous_, nullptr);
  }

 private:
  struct sigaction previous_ {};
  bool changed_ = false;
};

using flag_row = std::tuple<std::string, std::string, std::string, std::string, std::string>;

// A script's flag as the app flag table has it.
troupe::app_flag app_flag_of(const flag_row& row) {
  const auto& [flag, metavar, help, fallback, kind] = row;
  const auto type = kind == "whole"    ? troupe::app_flag::whole
                    : kind == "number" ? troupe::app_flag::number
                                       : troupe::app_flag::text;
  return troupe::app_flag{flag, metavar, help, fallback, type};
}

// Why `text` is not a value of the script's flag `row` ("": it is), as the flags' parser
// checks it when the job starts (a number or whole flag: a finite number >= 0, whole).
std::string check_app_flag(const flag_row& row, const std::string& text) {
  const auto flag = app_flag_of(row);
  auto parsed = troupe::parse_launch_options(
      {"--" + flag.name, text}, [](const std::string&) { return std::optional<std::string>{}; },
      {flag});
  return parsed ? std::string{} : troupe::describe(parsed.error());
}

// run_app for a Python task: `build(values)` gets the app flags' values (a dict of str) and
// returns the task; `flags` are (name, metavar, help, default, "text"|"number"|"whole") of the
// script's own flags; `defaults` are the script's values for flags (troupe.run's keyword
// options), which TROUPE_* variables and the command line override.
int run(py::object build, std::vector<std::string> argv, std::string name,
        std::vector<flag_row> flags, std::map<std::string, std::string> defaults) {
  troupe::app_description app;
  app.name = name;
  app.defaults = std::move(defaults);
  app.in_library = true;
  app.summary = "train a PyTorch model with Troupe";
  for (const auto& row : flags) app.flags.push_back(app_flag_of(row));
  const auto flag_names = app.flags;
  app.make_task = [build, flag_names](const troupe::launch_options& opts)
      -> caf::expected<std::unique_ptr<troupe::training_task>> {
    py::gil_scoped_acquire gil;
    py::object task;
    try {
      py::dict values;
      for (const auto& f : flag_names) values[py::str(f.name)] = opts.app_value(f.name);
      values["role"] = troupe::to_string(opts.role);
      // Trainers this process runs: every worker when embedded, else one.
      const bool embedded = opts.role == troupe::node_role::embedded;
      values["trainers_here"] = std::to_string(embedded ? opts.workers : 1);
      task = build(values);
    } catch (py::error_already_set& e) {
      return troupe::make_error(troupe::errc::task_failed,
                                "building the task: " + troupe::python::describe_python_error(e));
    }
    return troupe::python::make_python_task(std::move(task), opts.seed,
                                            troupe::logger("python", opts.level));
  };
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  auto back = std::make_shared<std::atomic<bool>>(false);
  int code = 1;
  {
    py::gil_scoped_release released;
    default_sigint sigint;
    code = troupe::run_app(static_cast<int>(argv.size()), args.data(), app);
    // A thread of the user's stuck in Python (a deadlock that the stall watchdog ended the job
    // for) may hold the GIL for good: then the process ends with the job's code, rather than
    // never return. (A finished job leaves no such thread.)
    if (code != 0)
      std::thread([back, code, name] {
        std::this_thread::sleep_for(return_bound);
        if (back->load()) return;
        std::fprintf(stderr,
                     "%s: the job ended but Python's lock was not free within %d s; ending now\n",
                     name.c_str(), static_cast<int>(return_bound.count()));
        std::_Exit(code);
      }).detach();
  }
  back->store(true);
  return code;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "Troupe's runtime for PyTorch tasks (use the troupe package, not this module)";
  m.def("run", &run, py::arg("build"), py::arg("argv"), py::arg("prog"), py::arg("flags"),
        py::arg("defaults"));
  m.def("check_app_flag", &check_app_flag, py::arg("row"), py::arg("text"),
        "why `text` is not a value of the script's flag `row` (\"\": it is)");
  m.def("common_flags", &troupe::common_flags,
        "(name, is_switch) of every flag of the Troupe binaries");
  m.def(
      "check_flag",
      [](const std::string& flag, const std::string& text) -> std::string {
        auto err = troupe::check_flag_value(flag, text);
        return err ? troupe::describe(err) : std::string{};
      },
      py::arg("flag"), py::arg("text"), "why `text` is not a value of --flag (\"\": it is)");
  troupe::python::bind_dash(m);
  troupe::python::bind_parameters(m);
  troupe::python::bind_groups(m);
  troupe::python::bind_tables(m);
}
