// The embedding rows a worker holds for one chunk of batches: which rows the chunk reads (per
// table, sorted), how they split into requests to the buckets that own them, filling their
// values from pull replies, and cutting the rows' gradients back into per-bucket pushes.
// Pure functions used by the worker actor.
#pragma once

#include <caf/error.hpp>

#include "messages/types.hpp"
#include "troupe/task.hpp"

namespace troupe {

// Collects the rows every batch of `chunk` reads into `rows` (ids sorted and unique, values
// and grads sized and zeroed).
void prepare_chunk_rows(task_replica& replica, const std::vector<table_spec>& tables,
                        const work_chunk& chunk, sparse_rows_view& rows);

// Sorts and de-duplicates each table's ids in `rows` (one entry per table, missing ones
// empty) and sizes values and grads to match, zeroed.
void size_rows(const std::vector<table_spec>& tables, sparse_rows_view& rows);

// The part of `rows` that bucket `bucket` of `buckets` owns, as pull requests.
std::vector<row_request> row_requests(const std::vector<table_spec>& tables,
                                      const sparse_rows_view& rows, uint32_t bucket,
                                      uint32_t buckets);

// Copies the values of a pull reply's rows into `rows`; errc::shape_mismatch for a row that
// was not asked for or has the wrong width.
caf::error fill_rows(const std::vector<table_spec>& tables, const std::vector<sparse_rows>& got,
                     sparse_rows_view& rows);

// The gradients of the rows bucket `bucket` owns, one sparse_rows per table.
std::vector<sparse_rows> row_gradients(const std::vector<table_spec>& tables,
                                       const sparse_rows_view& rows, uint32_t bucket,
                                       uint32_t buckets);

}  // namespace troupe
