// python_task: a training_task whose model is Python code (troupe.TorchTask, or any object with
// its methods: parameters, initialize, batches_per_epoch, make_replica, evaluate, and for
// tables tables and evaluation_rows; docs/python.md maps them onto troupe/task.hpp). Troupe's actor
// threads call it: every call takes the GIL, buffers cross as memoryviews over the trainer's own
// fp32 vectors (no copy), and a Python exception comes back as errc::task_failed carrying its
// traceback, never as a C++ exception. Built only into the Python extension (troupe._native).
#pragma once

#include <memory>

#include <pybind11/pybind11.h>

#include "troupe/log.hpp"
#include "troupe/task.hpp"

namespace troupe::python {

// Wraps `task` (a Python object, held with the GIL); `log` hears of exceptions in calls that
// cannot return an error (evaluate). Fails (errc::task_failed, or shape_mismatch for a
// parameter list that is not one) when parameters() or initialize(seed) raise.
caf::expected<std::unique_ptr<training_task>> make_python_task(pybind11::object task, uint64_t seed,
                                                               logger log);

// The text of the Python exception being handled: its type, message and traceback.
std::string describe_python_error(const pybind11::error_already_set& e);

}  // namespace troupe::python
