// Shared pieces of troupe-bench: timing with warm-up and repetitions (median, min, max), the
// result table every suite prints, and its JSON form. Used only by apps/bench.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace troupe::bench {

struct timing {
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
};

// Runs `once` `warmup` times untimed, then `reps` times timed.
timing measure(int warmup, int reps, const std::function<void()>& once);

// Times several cases round by round (each case once per round, in order), so that a case
// and the limit it is compared with see the same moments of a noisy machine; one timing per
// case.
std::vector<timing> measure_interleaved(int warmup, int reps,
                                        const std::vector<std::function<void()>>& cases);

// One line of a suite's table: our figure beside the limit measured in the same run.
struct row {
  std::string name;     // e.g. "adam 2Mi params"
  std::string unit;     // e.g. "GB/s"
  double ours = 0;      // median
  double ours_min = 0;  // slowest repetition, in the unit (min of the rate)
  double ours_max = 0;
  double limit = 0;  // the same-run limit (median)
  std::string limit_name;
  // More fields of the row's JSON (name, JSON value), e.g. {"backend", "\"gloo\""}.
  std::vector<std::pair<std::string, std::string>> extra;
};

struct suite_result {
  std::string suite;
  std::vector<row> rows;
};

// Prints the table (name, ours median [min..max], limit, ours/limit).
void print(const suite_result& result);

// Writes the same figures as JSON; false when the file cannot be written.
bool write_json(const suite_result& result, const std::string& path);

// Converts a timing of an operation that moves `units` of something into a rate row entry.
void fill_rate(row& r, const timing& t, double units);

// Starts args[0] with `args`, its stdout (and with `and_stderr` its stderr too) written to
// `out_path`, with "NAME=value" entries of `env` added to this process's environment; the
// child's pid, or -1 when it cannot start.
int spawn_logged(const std::vector<std::string>& args, const std::string& out_path,
                 bool and_stderr = false, const std::vector<std::string>& env = {});

// Waits for child `pid` until `deadline`, then kills it; true when it exited with status 0.
bool wait_for_exit(int pid, std::chrono::steady_clock::time_point deadline);

// Random floats in [-scale, scale] from a fixed seed (never time zeros).
std::vector<float> random_values(size_t n, uint64_t seed, float scale = 1.0f);

}  // namespace troupe::bench
