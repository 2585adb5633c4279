#include "python_task.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "troupe/error.hpp"
#include "troupe/ready_relay.hpp"

namespace py = pybind11;

namespace troupe::python {

namespace {

// A 1-D memoryview over `values`, valid for the call it is passed to only (parameters and rows
// are read-only by the protocol; Python sees one buffer type for both).
// An empty span's data() may be null, which Python refuses: an empty view then points at a
// placeholder instead.
template <class T>
py::memoryview view_of(std::span<const T> values) {
  static T placeholder{};
  T* data = values.empty() ? &placeholder : const_cast<T*>(values.data());
  return py::memoryview::from_buffer(data, {static_cast<py::ssize_t>(values.size())},
                                     {static_cast<py::ssize_t>(sizeof(T))});
}
py::memoryview view_of(std::span<const float> values) {
  return view_of<float>(values);
}

// The rows of `view` as Python's rows argument: per table (ids, values) or, `with_grads`,
// (ids, values, grads).
py::list rows_for_python(const sparse_rows_view& view, bool with_grads) {
  py::list out;
  for (size_t t = 0; t < view.ids.size(); ++t) {
    auto ids = view_of<uint64_t>(view.ids[t]);
    auto values = view_of(std::span<const float>(view.values[t]));
    if (with_grads)
      out.append(py::make_tuple(ids, values, view_of(std::span<const float>(view.grads[t]))));
    else
      out.append(py::make_tuple(ids, values));
  }
  return out;
}

// A list of 1-D buffers of 64-bit integers (numpy arrays, say), one per table, each sorted and
// unique, as Troupe's ids; throws (inside guarded) when it is not one.
std::vector<std::vector<uint64_t>> ids_from_python(const py::handle& list, size_t tables) {
  std::vector<std::vector<uint64_t>> out;
  for (auto item : list) {
    auto info = py::reinterpret_borrow<py::buffer>(item).request();
    const char kind = info.format.empty() ? '?' : info.format.back();  // "<q", "l", ...
    if (info.ndim != 1 || info.itemsize != 8 || (info.shape[0] > 1 && info.strides[0] != 8) ||
        std::string("qQlL").find(kind) == std::string::npos)
      throw std::runtime_error("ids must be 1-D contiguous 64-bit integer arrays");
    const auto* data = static_cast<const uint64_t*>(info.ptr);
    std::vector<uint64_t> ids(data, data + info.shape[0]);
    if (std::adjacent_find(ids.begin(), ids.end(), std::greater_equal<>()) != ids.end())
      throw std::runtime_error("ids must be sorted and unique");
    out.push_back(std::move(ids));
  }
  if (out.size() != tables)
    throw std::runtime_error(fmt::format("ids for {} tables, the task has {}", out.size(), tables));
  return out;
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

// Drops a Python object held by an actor, from whatever thread ends the actor. Once the
// interpreter is finalizing, taking its lock would end this thread (Python 3.11 exits such
// threads, which unwinding a destructor turns into std::terminate): the object is left.
void release_python(py::object& object) {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) {
    object.release();
    return;
  }
  py::gil_scoped_acquire gil;
  object = py::object();
}

class python_replica : public range_replica {
 public:
  python_replica(py::object replica, uint32_t batch, size_t tables, bool streams)
      : range_replica(batch), replica_(std::move(replica)), tables_(tables), streams_(streams) {}
  ~python_replica() override { release_python(replica_); }

  caf::expected<range_result> gradient_range(std::span<const float> params, uint32_t epoch,
                                             uint64_t first, uint32_t count, std::span<float> grad,
                                             const gradient_ready& ready) override {
    auto relay = std::make_shared<ready_relay>(ready);
    auto out = guarded("the task's gradient_range", [&] {
      py::object tell = py::none();
      if (ready) tell = py::cpp_function([relay](size_t tensor) { relay->tell(tensor); });
      py::tuple r = replica_.attr("gradient_range")(view_of(params), epoch, first, count,
                                                    view_of(grad), tell);
      if (r.size() != 2) throw std::runtime_error("gradient_range must return (loss, count)");
      return range_result{r[0].cast<double>(), r[1].cast<uint64_t>()};
    });
    if (ready) relay->close(bool(out));
    return checked(std::move(out), count);
  }

  // --zero-stage 2: the replica's gradient_range_streamed, when it has one, hands each tensor's
  // gradient to a put of ours (copied before the put returns, the GIL released meanwhile).
  bool streams_gradients() const override { return streams_; }
  caf::expected<range_result> gradient_range_streamed(std::span<const float> params, uint32_t epoch,
                                                      uint64_t first, uint32_t count,
                                                      const gradient_put& put) override {
    return streamed(params, nullptr, epoch, first, count, put);
  }
  caf::expected<range_result> gradient_range_streamed(std::span<const float> params,
                                                      sparse_rows_view& rows, uint32_t epoch,
                                                      uint64_t first, uint32_t count,
                                                      const gradient_put& put) override {
    if (rows_error_) return std::exchange(rows_error_, caf::error{});
    return streamed(params, &rows, epoch, first, count, put);
  }

  // Tables (ps and hybrid jobs): the rows a range reads, then its gradient with them. An
  // exception in rows_of_range fails the gradient that follows (rows_of cannot return one).
  std::vector<std::vector<uint64_t>> rows_of_range(uint32_t epoch, uint64_t first,
                                                   uint32_t count) override {
    auto ids = guarded("the task's rows_of_range", [&] {
      return ids_from_python(replica_.attr("rows_of_range")(epoch, first, count), tables_);
    });
    if (ids) return std::move(*ids);
    rows_error_ = std::move(ids.error());
    return std::vector<std::vector<uint64_t>>(tables_);
  }

  caf::expected<range_result> gradient_range(std::span<const float> params, sparse_rows_view& rows,
                                             uint32_t epoch, uint64_t first, uint32_t count,
                                             std::span<float> grad) override {
    if (rows_error_) return std::exchange(rows_error_, caf::error{});
    auto out = guarded("the task's gradient_range", [&] {
      py::tuple r =
          replica_.attr("gradient_range")(view_of(params), epoch, first, count, view_of(grad),
                                          py::none(), rows_for_python(rows, true));
      if (r.size() != 2) throw std::runtime_error("gradient_range must return (loss, count)");
      return range_result{r[0].cast<double>(), r[1].cast<uint64_t>()};
    });
    return checked(std::move(out), count);
  }

 private:
  caf::expected<range_result> streamed(std::span<const float> params, sparse_rows_view* rows,
                                       uint32_t epoch, uint64_t first, uint32_t count,
                                       const gradient_put& put) {
    auto relay = std::make_shared<put_relay>(put);
    auto out = guarded("the task's gradient_range_streamed", [&] {
      auto take = py::cpp_function([relay](size_t tensor, py::buffer values) {
        const auto info = values.request();
        if (info.format != py::format_descriptor<float>::format() || info.ndim != 1 ||
            info.strides[0] != static_cast<py::ssize_t>(sizeof(float)))
          throw std::invalid_argument("put takes a 1-D contiguous float32 buffer");
        const std::span<const float> gradient(static_cast<const float*>(info.ptr),
                                              static_cast<size_t>(info.shape[0]));
        py::gil_scoped_release unlocked;  // (the put may wait for a bucket buffer)
        relay->put(tensor, gradient);
      });
      py::object with_rows = py::none();
      if (rows) with_rows = rows_for_python(*rows, true);
      py::tuple r = replica_.attr("gradient_range_streamed")(view_of(params), epoch, first, count,
                                                             take, with_rows);
      if (r.size() != 2)
        throw std::runtime_error("gradient_range_streamed must return (loss, count)");
      return range_result{r[0].cast<double>(), r[1].cast<uint64_t>()};
    });
    relay->close(bool(out));
    return checked(std::move(out), count);
  }

  static caf::expected<range_result> checked(caf::expected<range_result> out, uint32_t count) {
    if (out && out->count > count)
      return failed("the task's gradient_range",
                    fmt::format("{} examples for a range of {}", out->count, count));
    return out;
  }

  py::object replica_;
  size_t tables_;
  bool streams_;           // the replica has gradient_range_streamed
  caf::error rows_error_;  // from the last rows_of_range, for the gradient that follows
};

class python_task : public training_task {
 public:
  python_task(py::object task, std::vector<tensor_spec> specs, std::vector<table_spec> tables,
              logger log)
      : task_(std::move(task)),
        specs_(std::move(specs)),
        tables_(std::move(tables)),
        log_(std::move(log)) {}
  ~python_task() override { release_python(task_); }

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
    auto replica = guarded("the task's make_replica", [&] {
      auto made = task_.attr("make_replica")(batch, seed);
      return std::make_pair(made, py::hasattr(made, "gradient_range_streamed"));
    });
    if (!replica) return std::move(replica.error());
    return std::unique_ptr<task_replica>(
        new python_replica(std::move(replica->first), batch, tables_.size(), replica->second));
  }

  evaluation evaluate(std::span<const float> params) const override {
    auto done = guarded("the task's evaluate", [&] {
      py::tuple r = task_.attr("evaluate")(view_of(params));
      if (r.size() != 2) throw std::runtime_error("evaluate must return (accuracy, loss)");
      return evaluation{r[0].cast<double>(), r[1].cast<double>()};
    });
    return evaluated(std::move(done));
  }

  std::vector<table_spec> sparse_tables() const override { return tables_; }

  std::vector<std::vector<uint64_t>> evaluation_rows() const override {
    if (tables_.empty()) return {};
    auto ids = guarded("the task's evaluation_rows", [&] {
      return ids_from_python(task_.attr("evaluation_rows")(), tables_.size());
    });
    if (ids) return std::move(*ids);
    log_.error("{}", describe(ids.error()));
    return std::vector<std::vector<uint64_t>>(tables_.size());
  }

  evaluation evaluate(std::span<const float> params, const sparse_rows_view& rows) const override {
    if (tables_.empty()) return evaluate(params);
    return evaluated(guarded("the task's evaluate", [&] {
      py::tuple r = task_.attr("evaluate")(view_of(params), rows_for_python(rows, false));
      if (r.size() != 2) throw std::runtime_error("evaluate must return (accuracy, loss)");
      return evaluation{r[0].cast<double>(), r[1].cast<double>()};
    }));
  }

 private:
  // An evaluation, or NaN for both figures (with the error logged) when it failed.
  evaluation evaluated(caf::expected<evaluation> done) const {
    if (done) return *done;
    log_.error("{}", describe(done.error()));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return evaluation{nan, nan};
  }

  py::object task_;
  std::vector<tensor_spec> specs_;
  std::vector<table_spec> tables_;
  logger log_;
};

// The task's parameters() as tensor specs: a list of (name, shape) with every dimension
// positive (a scalar's shape () is taken as (1,)).
caf::expected<std::vector<tensor_spec>> specs_of(const py::object& task) {
  return guarded("the task's parameters", [&] {
    std::vector<tensor_spec> specs;
    for (auto item : task.attr("parameters")()) {
      auto pair = item.cast<py::tuple>();
      if (pair.size() != 2 && pair.size() != 3)
        throw std::runtime_error("a tensor is (name, shape) or (name, shape, \"buffer\")");
      tensor_spec spec{pair[0].cast<std::string>(), {}};
      if (pair.size() == 3) {
        if (pair[2].cast<std::string>() != "buffer")
          throw std::runtime_error(
              fmt::format("tensor '{}': a third field other than \"buffer\"", spec.name));
        spec.buffer = true;
      }
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

// The task's tables() (none when it has no such method) as table specs: a list of
// (name, dim, init_scale, capacity[, evict, admit_after]).
caf::expected<std::vector<table_spec>> tables_of(const py::object& task) {
  return guarded("the task's tables", [&] {
    std::vector<table_spec> tables;
    if (!py::hasattr(task, "tables")) return tables;
    for (auto item : task.attr("tables")()) {
      auto t = item.cast<py::tuple>();
      if (t.size() != 4 && t.size() != 6)
        throw std::runtime_error(
            "a table is (name, dim, init_scale, capacity[, evict, admit_after])");
      table_spec spec{t[0].cast<std::string>(), t[1].cast<uint32_t>(), t[2].cast<float>(),
                      t[3].cast<uint64_t>()};
      if (t.size() == 6) {
        spec.evict = t[4].cast<std::string>();
        spec.admit_after = t[5].cast<uint32_t>();
      }
      if (spec.row_dim == 0 || spec.capacity == 0 || !(spec.init_scale >= 0.0f) ||
          !std::isfinite(spec.init_scale))
        throw std::runtime_error(
            fmt::format("table '{}': a dim, capacity and finite "
                        "init_scale of at least 1, 1 and 0",
                        spec.name));
      tables.push_back(std::move(spec));
    }
    return tables;
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
  auto tables = tables_of(task);
  if (!tables) return std::move(tables.error());
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
  return std::unique_ptr<training_task>(
      new python_task(std::move(task), std::move(*specs), std::move(*tables), log));
}

}  // namespace troupe::python
