#include "dash_binding.hpp"
#include "float_buffer.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "kernels/cpu/dash.hpp"
#include "kernels/cpu/optimizers.hpp"

namespace py = pybind11;

namespace troupe::python {

namespace {

// A writable 1-D float32 buffer of `n` values as a span.
std::span<float> floats(const py::buffer& b, size_t n, const char* what) {
  return float_buffer(b, n, what, true);
}

template <class E>
E named(const std::string& name, std::initializer_list<E> choices, const char* what) {
  for (E e : choices)
    if (name == to_string(e)) return e;
  throw py::value_error(fmt::format("{}: unknown '{}'", what, name));
}

class dash_binding {
 public:
  dash_binding(uint32_t rows, uint32_t cols, uint32_t block, uint32_t frequency,
               const std::string& solver, const std::string& scaling, const std::string& storage,
               bool nesterov, float beta1, float beta2, float eps, float weight_decay)
      : matrix_(rows, cols,
                config(block, frequency, solver, scaling, storage, nesterov, beta1, beta2, eps,
                       weight_decay)) {}

  uint32_t step(py::buffer theta, py::buffer grad, py::buffer m, py::buffer v, uint64_t step,
                float lr) {
    const size_t n = size_t{matrix_.rows()} * matrix_.cols();
    auto t = floats(theta, n, "theta");
    auto g = floats(grad, n, "grad");
    auto mm = floats(m, n, "m");
    auto vv = floats(v, n, "v");
    if (step == 0) throw py::value_error("step counts from 1");
    py::gil_scoped_release released;  // GEMMs and roots: other Python threads may run
    return matrix_.step(t, g, mm, vv, step, lr);
  }

  size_t state_count() const { return matrix_.state_count(); }
  size_t block_values(size_t i) const {
    checked(i);
    return matrix_.block_values(i);
  }
  // State tensor i (group i / 4: L, R, L^{-1/4}, R^{-1/4}, blocks stacked) as fp32 bytes.
  py::bytes state(size_t i) const {
    checked(i);
    const auto values = matrix_.state(i);
    return py::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  void set_state(size_t i, py::buffer values) {
    checked(i);
    auto info = values.request();
    if (info.itemsize != 4 || info.ndim != 1) throw py::value_error("state: a 1-D float32 buffer");
    const std::span<const float> v(static_cast<const float*>(info.ptr), info.shape[0]);
    if (v.size() != matrix_.state(i).size())
      throw py::value_error(
          fmt::format("state {}: {} values, not {}", i, v.size(), matrix_.state(i).size()));
    if (auto done = matrix_.set_state(i, 0, v); !done.ok())
      throw py::value_error(fmt::format("state {}: {}", i, done.what));
  }
  uint64_t resets() const { return matrix_.resets(); }

 private:
  static kernels::dash_config config(uint32_t block, uint32_t frequency, const std::string& solver,
                                     const std::string& scaling, const std::string& storage,
                                     bool nesterov, float beta1, float beta2, float eps,
                                     float weight_decay) {
    if (block < 2) throw py::value_error("block_size must be at least 2");
    if (frequency < 1) throw py::value_error("frequency must be at least 1");
    kernels::dash_config c;
    c.block = block;
    c.frequency = frequency;
    c.roots.solver = named(solver,
                           {root_solver::evd, root_solver::coupled_newton, root_solver::newton_db,
                            root_solver::chebyshev},
                           "solver");
    c.roots.scaling =
        named(scaling, {root_scaling::power_iteration, root_scaling::frobenius}, "scaling");
    c.storage =
        named(storage, {dash_storage::fp32, dash_storage::bf16, dash_storage::fp16}, "storage");
    c.nesterov = nesterov;
    c.adam = kernels::adam_hyper{0.0f, beta1, beta2, eps, weight_decay, 1};
    return c;
  }
  void checked(size_t i) const {
    if (i >= matrix_.state_count()) throw py::index_error("no such state tensor");
  }

  kernels::dash_matrix matrix_;
};

}  // namespace

void bind_dash(py::module_& m) {
  py::class_<dash_binding>(m, "DashMatrix")
      .def(py::init<uint32_t, uint32_t, uint32_t, uint32_t, const std::string&, const std::string&,
                    const std::string&, bool, float, float, float, float>(),
           py::arg("rows"), py::arg("cols"), py::arg("block"), py::arg("frequency"),
           py::arg("solver"), py::arg("scaling"), py::arg("storage"), py::arg("nesterov"),
           py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"))
      .def("step", &dash_binding::step, py::arg("theta"), py::arg("grad"), py::arg("m"),
           py::arg("v"), py::arg("step"), py::arg("lr"))
      .def("state_count", &dash_binding::state_count)
      .def("block_values", &dash_binding::block_values)
      .def("state", &dash_binding::state)
      .def("set_state", &dash_binding::set_state)
      .def("resets", &dash_binding::resets);
  m.def(
      "adam_step",
      [](py::buffer theta, py::buffer m, py::buffer v, py::buffer grad, float lr, float beta1,
         float beta2, float eps, float weight_decay, uint64_t step) {
        auto info = theta.request(true);
        const size_t n = info.ndim == 1 ? static_cast<size_t>(info.shape[0]) : 0;
        auto t = floats(theta, n, "theta");
        auto g = floats(grad, n, "grad");
        auto mm = floats(m, n, "m");
        auto vv = floats(v, n, "v");
        if (step == 0) throw py::value_error("step counts from 1");
        kernels::adam_step(t, mm, vv, g,
                           kernels::adam_hyper{lr, beta1, beta2, eps, weight_decay, step});
      },
      py::arg("theta"), py::arg("m"), py::arg("v"), py::arg("grad"), py::arg("lr"),
      py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("step"));
}

}  // namespace troupe::python
