#include "apps/bench/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <random>

namespace troupe::bench {

timing measure(int warmup, int reps, const std::function<void()>& once) {
  for (int i = 0; i < warmup; ++i) once();
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    once();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return {seconds[seconds.size() / 2], seconds.front(), seconds.back()};
}

void fill_rate(row& r, const timing& t, double units) {
  r.ours = units / t.median_s;
  r.ours_min = units / t.max_s;
  r.ours_max = units / t.min_s;
}

void print(const suite_result& result) {
  fmt::print("suite {}\n", result.suite);
  fmt::print("{:<34} {:>12} {:>25} {:>12}  {:<28} {:>7}\n", "case", "ours", "[min .. max]", "limit",
             "limit is", "ratio");
  for (const auto& r : result.rows) {
    fmt::print("{:<34} {:>12.4g} {:>25} {:>12.4g}  {:<28} {:>7.3f}   {}\n", r.name, r.ours,
               fmt::format("[{:.4g} .. {:.4g}]", r.ours_min, r.ours_max), r.limit, r.limit_name,
               r.limit > 0 ? r.ours / r.limit : 0.0, r.unit);
  }
}

bool write_json(const suite_result& result, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  out << fmt::format("{{\"suite\": \"{}\", \"rows\": [", result.suite);
  for (size_t i = 0; i < result.rows.size(); ++i) {
    const auto& r = result.rows[i];
    out << fmt::format(
        "{}\n  {{\"case\": \"{}\", \"unit\": \"{}\", \"median\": {:.6g}, \"min\": {:.6g}, "
        "\"max\": {:.6g}, \"limit\": {:.6g}, \"limit_is\": \"{}\", \"ratio\": {:.4f}",
        i ? "," : "", r.name, r.unit, r.ours, r.ours_min, r.ours_max, r.limit, r.limit_name,
        r.limit > 0 ? r.ours / r.limit : 0.0);
    for (const auto& [key, value] : r.extra) out << fmt::format(", \"{}\": {}", key, value);
    out << "}";
  }
  out << "\n]}\n";
  out.close();
  return static_cast<bool>(out);
}

std::vector<float> random_values(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> out(n);
  for (auto& x : out) x = dist(gen);
  return out;
}

}  // namespace troupe::bench
