#include "actors/worker/chunk_rows.hpp"

#include <algorithm>

#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"

namespace troupe {

void prepare_chunk_rows(task_replica& replica, const std::vector<table_spec>& tables,
                        const work_chunk& chunk, sparse_rows_view& rows) {
  rows.ids.assign(tables.size(), {});
  for (uint32_t i = 0; i < chunk.count; ++i) {
    auto wanted = replica.rows_of(chunk.epoch, chunk.first + i);
    for (size_t t = 0; t < tables.size() && t < wanted.size(); ++t)
      rows.ids[t].insert(rows.ids[t].end(), wanted[t].begin(), wanted[t].end());
  }
  size_rows(tables, rows);
}

void size_rows(const std::vector<table_spec>& tables, sparse_rows_view& rows) {
  rows.ids.resize(tables.size());
  rows.values.resize(tables.size());
  rows.grads.resize(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    auto& ids = rows.ids[t];
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    rows.values[t].assign(ids.size() * tables[t].row_dim, 0.0f);
    rows.grads[t].assign(ids.size() * tables[t].row_dim, 0.0f);
  }
}

std::vector<row_request> row_requests(const std::vector<table_spec>& tables,
                                      const sparse_rows_view& rows, uint32_t bucket,
                                      uint32_t buckets) {
  std::vector<row_request> out;
  for (size_t t = 0; t < tables.size(); ++t) {
    row_request r{tables[t].name, {}};
    for (uint64_t id : rows.ids[t])
      if (row_bucket(tables[t].name, id, buckets) == bucket) r.ids.push_back(id);
    if (!r.ids.empty()) out.push_back(std::move(r));
  }
  return out;
}

caf::error fill_rows(const std::vector<table_spec>& tables, const std::vector<sparse_rows>& got,
                     sparse_rows_view& rows) {
  for (const auto& part : got) {
    const auto t = std::find_if(tables.begin(), tables.end(),
                                [&](const table_spec& s) { return s.name == part.name; }) -
                   tables.begin();
    if (t == static_cast<long>(tables.size()) || part.row_dim != tables[t].row_dim ||
        part.values.size() != part.ids.size() * part.row_dim)
      return make_error(errc::shape_mismatch, "a bucket sent rows of another shape: " + part.name);
    const auto& ids = rows.ids[t];
    for (size_t i = 0; i < part.ids.size(); ++i) {
      const auto at = std::lower_bound(ids.begin(), ids.end(), part.ids[i]);
      if (at == ids.end() || *at != part.ids[i])
        return make_error(errc::shape_mismatch, "a bucket sent a row nobody asked for");
      std::copy_n(part.values.begin() + i * part.row_dim, part.row_dim,
                  rows.values[t].begin() + (at - ids.begin()) * part.row_dim);
    }
  }
  return {};
}

std::vector<sparse_rows> row_gradients(const std::vector<table_spec>& tables,
                                       const sparse_rows_view& rows, uint32_t bucket,
                                       uint32_t buckets) {
  std::vector<sparse_rows> out;
  for (size_t t = 0; t < tables.size(); ++t) {
    const uint32_t dim = tables[t].row_dim;
    sparse_rows part{tables[t].name, dim, {}, {}};
    for (size_t i = 0; i < rows.ids[t].size(); ++i) {
      if (row_bucket(tables[t].name, rows.ids[t][i], buckets) != bucket) continue;
      part.ids.push_back(rows.ids[t][i]);
      part.values.insert(part.values.end(), rows.grads[t].begin() + i * dim,
                         rows.grads[t].begin() + (i + 1) * dim);
    }
    if (!part.ids.empty()) out.push_back(std::move(part));
  }
  return out;
}

}  // namespace troupe
