// troupe-bench apply: how fast a parameter bucket applies one push, for each optimizer and
// with DC-ASGD, against a plain loop that reads and writes the same bytes (memory bandwidth).
// Bytes counted per parameter: every array the update reads plus every array it writes.
#include <algorithm>
#include <chrono>

#include "actors/bucket/bucket_store.hpp"
#include "apps/bench/suites.hpp"

namespace troupe::bench {

namespace {

struct apply_case {
  std::string name;
  optimizer_config::kind optimizer;
  compensation_config::kind compensation;
  int reads;   // arrays read per parameter (theta, g, optimizer state, theta_read)
  int writes;  // arrays written per parameter
};

// The memory-bandwidth limit: R arrays read and the first W of them written back, as a loop
// the compiler can vectorise (R and W are compile-time constants).
template <int R, int W>
void plain_loop(std::vector<std::vector<float>>& arrays) {
  float* a[R];
  for (int k = 0; k < R; ++k) a[k] = arrays[k].data();
  const size_t n = arrays[0].size();
  for (size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int k = 0; k < R; ++k) sum += a[k][i];
    for (int k = 0; k < W; ++k) a[k][i] = 0.5f * sum - a[k][i];
  }
}

void run_plain_loop(std::vector<std::vector<float>>& arrays, int reads, int writes);

// Writes a buffer much larger than any cache, so that the next measurement starts cold (a
// pushed gradient always arrives fresh from the network).
void evict_caches() {
  static std::vector<char> scratch(size_t{256} << 20);
  static char value = 0;
  std::fill(scratch.begin(), scratch.end(), ++value);
}

double plain_loop_seconds(size_t n, int reads, int writes, int reps) {
  std::vector<std::vector<float>> arrays;
  for (int a = 0; a < reads; ++a) arrays.push_back(random_values(n, 100 + a));
  std::vector<double> seconds;
  for (int r = 0; r <= reps; ++r) {
    evict_caches();
    const auto start = std::chrono::steady_clock::now();
    run_plain_loop(arrays, reads, writes);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  seconds.erase(seconds.begin());
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

void run_plain_loop(std::vector<std::vector<float>>& arrays, int reads, int writes) {
  {
    switch (reads * 10 + writes) {
      case 21:
        return plain_loop<2, 1>(arrays);
      case 32:
        return plain_loop<3, 2>(arrays);
      case 43:
        return plain_loop<4, 3>(arrays);
      case 54:
        return plain_loop<5, 4>(arrays);
      default:
        return;
    }
  }
}

bucket_spec spec_of(size_t n, const apply_case& c) {
  bucket_spec spec;
  spec.workers = 2;
  spec.optimizer.type = c.optimizer;
  spec.compensation = {c.compensation, 0.04f};
  spec.tensors.push_back(dense_tensor{"w", {static_cast<uint32_t>(n)}, 0, random_values(n, 1)});
  return spec;
}

row run_case(size_t n, const apply_case& c, int reps) {
  bucket_store store{spec_of(n, c)};
  store.grant_pull(0, 0);  // worker 0 has read: delay compensation has a theta_read
  push_request push{0, 0, 0, vector_clock{2}, {}, {}, {}};
  push.dense.push_back(
      dense_tensor{"w", {static_cast<uint32_t>(n)}, 0, random_values(n, 2, 1e-3f)});
  // apply() takes the push by value: the copies are made before the clock starts.
  std::vector<push_request> copies(reps + 1, push);
  std::vector<double> seconds;
  for (auto& copy : copies) {
    evict_caches();
    const auto start = std::chrono::steady_clock::now();
    const bool applied = static_cast<bool>(store.apply(std::move(copy)));
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!applied) return row{c.name + ": the bucket rejected the push", "GB/s"};
  }
  seconds.erase(seconds.begin());  // the first one warms up
  std::sort(seconds.begin(), seconds.end());
  const timing ours{seconds[seconds.size() / 2], seconds.front(), seconds.back()};
  const double bytes = double(n) * 4.0 * (c.reads + c.writes);
  row r{c.name + " " + std::to_string(n >> 20) + "Mi", "GB/s"};
  fill_rate(r, ours, bytes / 1e9);
  r.limit = bytes / 1e9 / plain_loop_seconds(n, c.reads, c.writes, reps);
  r.limit_name = "read/write loop, same bytes";
  return r;
}

}  // namespace

suite_result run_apply(const options& o) {
  const size_t n = o.size ? o.size : size_t{2} << 20;
  using k = optimizer_config::kind;
  using dc = compensation_config::kind;
  const std::vector<apply_case> cases = {
      {"sgd", k::sgd, dc::none, 2, 1},
      {"momentum", k::momentum, dc::none, 3, 2},
      {"adam", k::adam, dc::none, 4, 3},
      {"adamw", k::adamw, dc::none, 4, 3},
      {"adam + dcasgd", k::adam, dc::dcasgd, 5, 4},
  };
  suite_result result{"apply", {}};
  for (const auto& c : cases) result.rows.push_back(run_case(n, c, o.reps));
  return result;
}

}  // namespace troupe::bench
