// troupe-row-bytes: the bytes an embedding row costs a server (issue 59), measured as the issue
// defines them: (this process's resident memory after a bucket's table took N rows, minus
// before) / N, index, eviction and admission state and slack included. For Adam and SGD at
// dim 8 (also with LFU eviction and admission after 2 sightings) and Adam at dim 64, beside
// the row's data (its value and moments, 8 bytes of id, 8 of update count) and the issue's
// target ratio. Usage: troupe-row-bytes [ROWS=4000000]
#include <fmt/format.h>

#include <cstdlib>
#include <vector>

#include "actors/bucket/sparse_table.hpp"
#include "troupe/metrics.hpp"

namespace {

struct row_case {
  const char* name;
  troupe::optimizer_config::kind optimizer;
  uint32_t dim;
  double target;  // at most this many times the row's data
  const char* evict = "none";
  uint32_t admit_after = 1;  // > 1: each id is read that many times (the sketch is counted)
};

// Reads `rows` ids (in sorted batches, as workers send them) into a fresh table; the bytes of
// resident memory that took, per row. A table with eviction has `rows` as its capacity.
double bytes_per_row(const row_case& c, uint64_t rows) {
  troupe::optimizer_config o;
  o.type = c.optimizer;
  const auto evict = *troupe::parse_eviction(c.evict);
  const bool evicts = evict.type != troupe::eviction_policy::kind::none;
  troupe::table_config t{"t", c.dim, 0.01f, evicts ? rows : rows * 2, evict, c.admit_after};
  const uint64_t before = troupe::current_process_usage().rss_bytes;
  troupe::sparse_table table(t, 0, 1, 1, o, 0.0f);
  std::vector<uint64_t> ids(4096);
  for (uint64_t first = 0; first < rows; first += ids.size()) {
    ids.resize(std::min<uint64_t>(4096, rows - first));
    for (size_t j = 0; j < ids.size(); ++j) ids[j] = (first + j) * 7;  // distinct, sorted
    for (uint32_t sighting = 0; sighting < c.admit_after; ++sighting)
      if (!table.read(ids)) return -1;
  }
  if (table.size() != rows) return -1;
  const uint64_t after = troupe::current_process_usage().rss_bytes;
  return double(after - before) / double(rows);
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t rows = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4'000'000;
  using kind = troupe::optimizer_config::kind;
  const row_case cases[] = {{"adam, dim 8", kind::adam, 8, 1.3},
                            {"sgd, dim 8", kind::sgd, 8, 1.6},
                            {"adam, dim 64", kind::adam, 64, 1.15},
                            {"adam, dim 8, lfu, admit 2", kind::adam, 8, 1.3, "lfu", 2},
                            {"sgd, dim 8, lfu, admit 2", kind::sgd, 8, 1.6, "lfu", 2}};
  fmt::print("{} rows a table, one bucket\n", rows);
  fmt::print("{:<26} {:>10} {:>10} {:>7} {:>7}\n", "table", "bytes/row", "data", "ratio", "target");
  for (const auto& c : cases) {
    const unsigned moments = c.optimizer == kind::sgd ? 0 : 2;
    const double data = 4.0 * c.dim * (1 + moments) + 16;  // + id and update count
    const double bytes = bytes_per_row(c, rows);
    fmt::print("{:<26} {:>10.1f} {:>10.0f} {:>7.2f} {:>7.2f}\n", c.name, bytes, data, bytes / data,
               c.target);
  }
  return 0;
}
