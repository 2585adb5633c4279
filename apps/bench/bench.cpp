#include "apps/bench/bench.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <thread>

#include "messages/json.hpp"

extern char** environ;

namespace troupe::bench {

int spawn_logged(const std::vector<std::string>& args, const std::string& out_path, bool and_stderr,
                 const std::vector<std::string>& env) {
  std::vector<std::string> entries = env;
  for (char** e = environ; *e; ++e) entries.emplace_back(*e);
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : entries) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  if (and_stderr) posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

bool wait_for_exit(int pid, std::chrono::steady_clock::time_point deadline) {
  if (pid <= 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

namespace {

timing summary(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return {seconds[seconds.size() / 2], seconds.front(), seconds.back()};
}

double seconds_of(const std::function<void()>& once) {
  const auto start = std::chrono::steady_clock::now();
  once();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

timing measure(int warmup, int reps, const std::function<void()>& once) {
  return measure_interleaved(warmup, reps, {once}).front();
}

std::vector<timing> measure_interleaved(int warmup, int reps,
                                        const std::vector<std::function<void()>>& cases) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& once : cases) once();
  std::vector<std::vector<double>> seconds(cases.size());
  for (int i = 0; i < reps; ++i)
    for (size_t c = 0; c < cases.size(); ++c) seconds[c].push_back(seconds_of(cases[c]));
  std::vector<timing> out;
  for (auto& s : seconds) out.push_back(summary(std::move(s)));
  return out;
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
  json rows = json::array();
  for (const auto& r : result.rows) {
    json row = {{"case", r.name},           {"unit", r.unit},
                {"median", r.ours},         {"min", r.ours_min},
                {"max", r.ours_max},        {"limit", r.limit},
                {"limit_is", r.limit_name}, {"ratio", r.limit > 0 ? r.ours / r.limit : 0.0}};
    // Extra fields hold JSON text (a number, a quoted string); kept as text when it is not.
    for (const auto& [key, value] : r.extra) {
      auto parsed = json::parse(value, nullptr, false);
      row[key] = parsed.is_discarded() ? json(value) : std::move(parsed);
    }
    rows.push_back(std::move(row));
  }
  std::ofstream out(path, std::ios::trunc);
  out << to_text(json{{"suite", result.suite}, {"rows", std::move(rows)}});
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
