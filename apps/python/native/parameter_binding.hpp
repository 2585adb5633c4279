// The native side of troupe.ParameterService and troupe.ParameterClient
// (apps/python/troupe/parameters.py): a parameter_service started in this process (and
// served to others through an app_node), and blocking_parameter_clients of it or of one
// another process serves. Values cross as float32 buffers (numpy arrays), never as torch
// objects. Python code uses the troupe package, not these.
#pragma once

#include <pybind11/pybind11.h>

namespace troupe::python {

void bind_parameters(pybind11::module_& m);

}  // namespace troupe::python
