// A Python buffer (a numpy array) of float32 values as a span, checked: contiguous, 1-D, float32
// and exactly `n` values (ValueError naming `what` otherwise). `writable` asks for a buffer the
// extension may write (a read-only one is refused). For the extension's bindings.
#pragma once

#include <span>

#include <fmt/format.h>
#include <pybind11/pybind11.h>

namespace troupe::python {

inline std::span<float> float_buffer(const pybind11::buffer& b, size_t n, const char* what,
                                     bool writable) {
  namespace py = pybind11;
  auto info = b.request(writable);
  if (info.itemsize != 4 || info.format != py::format_descriptor<float>::format() ||
      info.ndim != 1 || (info.shape[0] > 1 && info.strides[0] != 4))
    throw py::value_error(fmt::format("{}: a contiguous 1-D float32 buffer", what));
  if (static_cast<size_t>(info.shape[0]) != n)
    throw py::value_error(fmt::format("{}: {} values, not {}", what, info.shape[0], n));
  return {static_cast<float*>(info.ptr), n};
}

}  // namespace troupe::python
