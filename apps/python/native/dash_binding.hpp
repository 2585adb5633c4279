// The DASH kernels (kernels/cpu/dash.hpp) and the Adam step (kernels/cpu/optimizers.hpp) for
// troupe.optim.DASH: `_native.DashMatrix` steps one matrix parameter in place, `_native.adam_step`
// one vector. Buffers cross as writable float32 memoryviews (torch CPU tensors' numpy views);
// a wrong size or an unknown name raises ValueError. Part of the extension troupe._native.
#pragma once

#include <pybind11/pybind11.h>

namespace troupe::python {

void bind_dash(pybind11::module_& m);

}  // namespace troupe::python
