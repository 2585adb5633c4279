// troupe.table's native half: `_native.is_eviction(text)` (the evict policies' one parser), and
// the reader of a job's --export-dir (troupe/table_deltas.hpp): `_native.read_deltas(dir)` and
// `_native.DeltaFollower(dir)` with poll() and tables(), each table as (ids uint64 array,
// values float32 array of shape (rows, dim)). A directory that cannot be read raises
// ValueError. Part of the extension troupe._native.
#pragma once

#include <pybind11/pybind11.h>

namespace troupe::python {

void bind_tables(pybind11::module_& m);

}  // namespace troupe::python
