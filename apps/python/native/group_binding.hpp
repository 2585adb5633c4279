// The native side of troupe.elastic and troupe.DistributedOptimizer
// (apps/python/troupe/elastic.py, distributed.py): a loop group served by an app node in
// this process (GroupService), and this process's membership in one (a loop_member: the
// generation, reductions of float32 buffers, agreeing on a state). Buffers cross as numpy
// arrays, never torch objects. Python code uses the troupe package, not these.
#pragma once

#include <pybind11/pybind11.h>

namespace troupe::python {

void bind_groups(pybind11::module_& m);

}  // namespace troupe::python
