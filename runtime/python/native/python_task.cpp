#include "python_task.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

#include "troupe/error.hpp"

namespace py = pybind11;

namespace troupe::python {

namespace {

// A 1-D float32 memoryview over `values`, valid for the call it is passed to only (the
// parameters are read-only by the protocol; Python sees one buffer type for both).
py::memoryview view_of(std::span<const float> values) {
  return py::memoryview::from_buffer(const_cast<float*>(values.data()),
                                     {static_cast<py::ssize_t>(values.size())},
                                     {static_cast<py::ssize_t>(sizeof(float))});
}

caf::error failed(const std::string& doing, const std::string& why) {
  return make_error(errc::task_failed, fmt::format("{}: {}", doing, why));
}

// Runs `call` with the GIL; a Python exception or a result of the wrong type becomes
// errc::task_failed naming `doing`.
template <class F>
auto guarded(const std::string& doing, F call) -> caf::expected<decltype(call())> {
  py::gil_scoped_acquire gil;
  try {
    return call();
  } catch (py::error_already_set& e) {
    return failed(doing, describe_python_error(e));
  } catch (const std::exception& e) {  // pybind11's cast_error and the like
    return failed(doing, e.what());
  }
}

// Passes a Python trainer's "tensor i is final" on to Troupe's gradient_ready. Backward's
// hooks may run on torch's own threads: only a call from the thread that runs the step (the
// actor's) goes through at once; others wait until the step returns. Closed after the step.
struct ready_relay {
  const gradient_ready* ready = nullptr;
  std::thread::id owner = std::this_thread::get_id();
  std::mutex mutex;
  std::vector<size_t> later;
  bool open = true;

  void tell(size_t tensor) {
    if (std::this_thread::get_id() == owner) {
      if (open) (*ready)(tensor);
      return;
    }
    std::lock_guard lock(mutex);
    if (open) later.push_back(tensor);
  }
  // Delivers what waited (`deliver`: the step succeeded; otherwise its gradient is not final
  // and nothing more is told).
  void close(bool deliver) {
    std::vector<size_t> due;
    {
      std::lock_guard lock(mutex);
      open = false;
      due.swap(later);
    }
    if (deliver)
      for (size_t t : due) (*ready)(t);
  }
};

class python_replica : public task_replica {
 public:
  python_replica(py::object replica, uint32_t batch)
      : replica_(std::move(replica)), batch_(batch) {}
  ~python_replica() override {
    py::gil_scoped_acquire gil;
    replica_ = py::object();
  }

  caf::expected<float> gradient(std::span<const float> params, uint32_t epoch, uint64_t batch,
                                std::span<float> grad) override {
    auto done = gradient_range(params, epoch, batch * batch_, batch_, grad, {});
    if (!done) return std::move(done.error());
    return static_cast<float>(done->loss);
  }

  caf::expected<range_result> gradient_range(std::span<const float> params, uint32_t epoch,
                                             uint64_t first, uint32_t count, std::span<float> grad,
                                             const gradient_ready& ready) override {
    auto relay = std::make_shared<ready_relay>();
    relay->ready = &ready;
    auto out = guarded("the task's gradient_range", [&] {
      py::object tell = py::none();
      if (ready) tell = py::cpp_function([relay](size_t tensor) { relay->tell(tensor); });
      py::tuple r = replica_.attr("gradient_range")(view_of(params), epoch, first, count,
                                                    view_of(grad), tell);
      if (r.size() != 2) throw std::runtime_error("gradient_range must return (loss, count)");
      return range_result{r[0].cast<double>(), r[1].cast<uint64_t>()};
    });
    if (ready) relay->close(bool(out));
    if (out && out->count > count)
      return failed("the task's gradient_range",
                    fmt::format("{} examples for a range of {}", out->count, count));
    return out;
  }

 private:
  py::object replica_;
  uint32_t batch_;
};

class python_task : public training_task {
 public:
  python_task(py::object task, std::vector<tensor_spec> specs, logger log)
      : task_(std::move(task)), specs_(std::move(specs)), log_(std::move(log)) {}
  ~python_task() override {
    py::gil_scoped_acquire gil;
    task_ = py::object();
  }

  std::vector<tensor_spec> parameters() const override { return specs_; }

  void initialize(uint64_t seed, std::span<float> params) const override {
    auto done = guarded("the task's initialize", [&] {
      task_.attr("initialize")(seed, view_of(params));
      return true;
    });
    if (done) return;
    // Only after a first initialize succeeded (make_python_task): the job sees NaN and
    // refuses them rather than training from values nobody chose.
    log_.error("{}", describe(done.error()));
    std::fill(params.begin(), params.end(), std::numeric_limits<float>::quiet_NaN());
  }

  uint64_t batches_per_epoch(uint32_t batch) const override {
    auto n = guarded("the task's batches_per_epoch",
                     [&] { return task_.attr("batches_per_epoch")(batch).cast<uint64_t>(); });
    if (n) return *n;
    log_.error("{}", describe(n.error()));
    return 0;
  }

  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                            uint64_t seed) const override {
    auto replica =
        guarded("the task's make_replica", [&] { return task_.attr("make_replica")(batch, seed); });
    if (!replica) return std::move(replica.error());
    return std::unique_ptr<task_replica>(new python_replica(std::move(*replica), batch));
  }

  evaluation evaluate(std::span<const float> params) const override {
    auto done = guarded("the task's evaluate", [&] {
      py::tuple r = task_.attr("evaluate")(view_of(params));
      if (r.size() != 2) throw std::runtime_error("evaluate must return (accuracy, loss)");
      return evaluation{r[0].cast<double>(), r[1].cast<double>()};
    });
    if (done) return *done;
    log_.error("{}", describe(done.error()));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return evaluation{nan, nan};
  }

 private:
  py::object task_;
  std::vector<tensor_spec> specs_;
  logger log_;
};

// The task's parameters() as tensor specs: a list of (name, shape) with every dimension
// positive (a scalar's shape () is taken as (1,)).
caf::expected<std::vector<tensor_spec>> specs_of(const py::object& task) {
  return guarded("the task's parameters", [&] {
    std::vector<tensor_spec> specs;
    for (auto item : task.attr("parameters")()) {
      auto pair = item.cast<py::tuple>();
      tensor_spec spec{pair[0].cast<std::string>(), {}};
      for (auto d : pair[1]) {
        const auto n = d.cast<int64_t>();
        if (n <= 0 || n > int64_t{1} << 31)
          throw std::runtime_error(fmt::format("tensor '{}': dimension {}", spec.name, n));
        spec.shape.push_back(static_cast<uint32_t>(n));
      }
      if (spec.shape.empty()) spec.shape.push_back(1);
      specs.push_back(std::move(spec));
    }
    if (specs.empty()) throw std::runtime_error("the model has no parameters");
    return specs;
  });
}

}  // namespace

std::string describe_python_error(const py::error_already_set& e) {
  try {
    auto format = py::module_::import("traceback").attr("format_exception");
    std::string text;
    for (auto line : format(e.type(), e.value(), e.trace())) text += line.cast<std::string>();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  } catch (...) {
    return e.what();
  }
}

caf::expected<std::unique_ptr<training_task>> make_python_task(py::object task, uint64_t seed,
                                                               logger log) {
  auto specs = specs_of(task);
  if (!specs) return std::move(specs.error());
  size_t total = 0;
  for (const auto& s : *specs) {
    size_t n = 1;
    for (auto d : s.shape) n *= d;
    total += n;
  }
  // A first initialize here, so that a task that cannot build its model fails the process
  // with the traceback before any actor starts.
  std::vector<float> trial(total);
  auto done = guarded("the task's initialize", [&] {
    task.attr("initialize")(seed, view_of(trial));
    return true;
  });
  if (!done) return std::move(done.error());
  return std::unique_ptr<training_task>(new python_task(std::move(task), std::move(*specs), log));
}

}  // namespace troupe::python
