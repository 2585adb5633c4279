#include "table_binding.hpp"

#include <pybind11/numpy.h>

#include <algorithm>

#include "troupe/error.hpp"
#include "troupe/table_deltas.hpp"
#include "troupe/values.hpp"

namespace py = pybind11;

namespace troupe::python {

namespace {

// {table: (ids, values)} as numpy arrays (copies).
py::dict as_arrays(const std::map<std::string, followed_table>& tables) {
  py::dict out;
  for (const auto& [name, t] : tables) {
    py::array_t<uint64_t> ids(static_cast<py::ssize_t>(t.ids.size()));
    std::copy(t.ids.begin(), t.ids.end(), ids.mutable_data());
    py::array_t<float> values(
        {static_cast<py::ssize_t>(t.ids.size()), static_cast<py::ssize_t>(t.row_dim)});
    std::copy(t.values.begin(), t.values.end(), values.mutable_data());
    out[py::str(name)] = py::make_tuple(ids, values);
  }
  return out;
}

}  // namespace

void bind_tables(py::module_& m) {
  m.def(
      "is_eviction", [](const std::string& text) { return parse_eviction(text).has_value(); },
      py::arg("text"), "whether `text` is a table's evict policy (troupe/values.hpp)");
  m.def(
      "read_deltas",
      [](const std::string& dir) {
        auto tables = read_deltas(dir);
        if (!tables) throw py::value_error(describe(tables.error()));
        return as_arrays(*tables);
      },
      py::arg("dir"));
  py::class_<delta_follower>(m, "DeltaFollower")
      .def(py::init<std::string>(), py::arg("dir"))
      .def("poll",
           [](delta_follower& f) {
             auto applied = f.poll();
             if (!applied) throw py::value_error(describe(applied.error()));
             return *applied;
           })
      .def("tables", [](const delta_follower& f) { return as_arrays(f.tables()); })
      .def("clocks", &delta_follower::clocks);
}

}  // namespace troupe::python
