// troupe-table-pushes: how many row pushes a bucket's table takes a second (issue 59), in one
// run: today's compact table (sparse_table) without eviction and with LFU at a tenth of the
// ids, beside the table it replaced (a hash map of rows, each three heap vectors: kept here as
// the peer). Each push is what a worker sends: a read of a batch's sorted ids, then their
// Adam row gradients. Ids are drawn Zipf-like over the vocabulary, the same for every table.
// Usage: troupe-table-pushes [VOCABULARY=2000000] [PUSHES=3000] [IDS_PER_PUSH=4096] [DIM=8]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <unordered_map>
#include <vector>

#include "actors/bucket/elementwise_step.hpp"
#include "actors/bucket/sparse_table.hpp"
#include "troupe/detail/layout.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// The table the compact rows replaced: one hash-map node per row, its value and Adam moments
// in heap vectors of their own (actors/bucket/sparse_table.hpp before issue 59).
class map_table {
 public:
  map_table(uint32_t dim, troupe::optimizer_config o) : dim_(dim), optimizer_(o) {}

  void read(const std::vector<uint64_t>& ids, std::vector<float>& out) {
    out.clear();
    for (uint64_t id : ids) {
      auto [at, fresh] = rows_.try_emplace(id);
      if (fresh) {
        at->second.value.resize(dim_);
        troupe::init_row(1, "t", id, 0.01f, at->second.value);
        at->second.m.assign(dim_, 0.0f);
        at->second.v.assign(dim_, 0.0f);
      }
      out.insert(out.end(), at->second.value.begin(), at->second.value.end());
    }
  }

  void apply(const troupe::sparse_rows& grads) {
    for (size_t i = 0; i < grads.ids.size(); ++i) {
      const auto at = rows_.find(grads.ids[i]);
      if (at == rows_.end()) continue;
      auto& r = at->second;
      const std::span<const float> g(grads.values.data() + i * dim_, dim_);
      troupe::step_elementwise(optimizer_, optimizer_.lr, ++r.steps, r.value, r.m, r.v, g);
    }
  }

 private:
  struct row {
    std::vector<float> value, m, v;
    uint64_t steps = 0;
  };
  uint32_t dim_;
  troupe::optimizer_config optimizer_;
  std::unordered_map<uint64_t, row> rows_;
};

// Every push's ids, drawn once: `per_push` distinct ids, sorted, Zipf(0.8)-like over the
// vocabulary (a power of a uniform draw, so most ids come back now and then).
std::vector<std::vector<uint64_t>> draw_pushes(uint64_t vocabulary, size_t pushes,
                                               size_t per_push) {
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::vector<uint64_t>> out(pushes);
  for (auto& ids : out) {
    while (ids.size() < per_push)
      ids.push_back(static_cast<uint64_t>(std::pow(unit(gen), 2.5) * double(vocabulary)));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  return out;
}

template <class Push>
double pushes_per_second(const std::vector<std::vector<uint64_t>>& pushes, Push&& push) {
  const auto began = clock_type::now();
  for (const auto& ids : pushes) push(ids);
  return double(pushes.size()) / std::chrono::duration<double>(clock_type::now() - began).count();
}

}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, uint64_t fallback) {
    return argc > i ? std::strtoull(argv[i], nullptr, 10) : fallback;
  };
  const uint64_t vocabulary = arg(1, 2'000'000);
  const size_t pushes = arg(2, 3000), per_push = arg(3, 4096);
  const auto dim = static_cast<uint32_t>(arg(4, 8));
  troupe::optimizer_config adam;  // the default: Adam
  adam.lr = 0.01f;
  const auto drawn = draw_pushes(vocabulary, pushes, per_push);
  std::vector<float> grads_of_push(per_push * dim, 0.001f);

  auto compact = [&](const std::string& evict, uint64_t capacity) {
    troupe::sparse_table table(
        troupe::table_config{"t", dim, 0.01f, capacity, *troupe::parse_eviction(evict), 1}, 0, 1, 1,
        adam, 0.0f);
    const double rate = pushes_per_second(drawn, [&](const std::vector<uint64_t>& ids) {
      auto rows = table.read(ids);
      if (!rows) std::abort();
      (void)table.take_evicted();  // (a bucket hands them to its backup)
      table.apply(
          troupe::sparse_rows{
              "t", dim, ids, {grads_of_push.begin(), grads_of_push.begin() + ids.size() * dim}},
          1.0f);
    });
    return std::pair{rate, table.counters()};
  };
  map_table old_table(dim, adam);
  std::vector<float> read_out;
  const double old_rate = pushes_per_second(drawn, [&](const std::vector<uint64_t>& ids) {
    old_table.read(ids, read_out);
    old_table.apply(troupe::sparse_rows{
        "t", dim, ids, {grads_of_push.begin(), grads_of_push.begin() + ids.size() * dim}});
  });
  const auto [plain_rate, plain] = compact("none", vocabulary * 2);
  const auto [lfu_rate, lfu] = compact("lfu", vocabulary / 10);

  fmt::print("{} pushes of up to {} ids (Adam, dim {}) over {} ids\n", pushes, per_push, dim,
             vocabulary);
  fmt::print("{:<34} {:>12} {:>10} {:>12}\n", "table", "pushes/s", "vs map", "rows held");
  fmt::print("{:<34} {:>12.0f} {:>10.2f} {:>12}\n", "hash map of vectors (replaced)", old_rate, 1.0,
             "-");
  fmt::print("{:<34} {:>12.0f} {:>10.2f} {:>12}\n", "compact rows, no eviction", plain_rate,
             plain_rate / old_rate, plain.rows);
  fmt::print("{:<34} {:>12.0f} {:>10.2f} {:>12}\n", "compact rows, lfu at 10% of the ids", lfu_rate,
             lfu_rate / old_rate, lfu.rows);
  fmt::print("lfu: {} rows evicted\n", lfu.rows_evicted);
  return 0;
}
