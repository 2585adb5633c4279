// Test helpers: start a program as a child process with its output in a file, wait for it with
// a deadline, and make sure it is gone when the test ends (the destructor kills it). Also reads
// numbers and lists from JSON text (a job's report). Waiting on progress is progress.hpp's,
// files go in scratch.hpp's folder, loopback sockets are loopback.hpp's. For tests only.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "messages/json.hpp"
#include "tests/support/loopback.hpp"
#include "tests/support/progress.hpp"
#include "tests/support/scratch.hpp"

extern char** environ;

namespace troupe::testing {

class child_process {
 public:
  // Starts `args[0]` with `args`, extra "NAME=value" entries added to the environment, stdout
  // and stderr appended to `log_path`.
  child_process(const std::vector<std::string>& args, const std::string& log_path,
                const std::vector<std::string>& extra_env = {})
      : log_path_(log_path) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  ~child_process() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // Sends SIGKILL, as a crash would end the process.
  void kill() {
    signal(SIGKILL);
    killed_ = true;
  }
  bool killed() const { return killed_; }

  // Sends any signal (SIGSTOP freezes the process while its sockets stay open).
  void signal(int number) {
    if (pid_ > 0 && !exit_code_) ::kill(pid_, number);
  }

  // Waits until the output holds `text` `count` times; false if the process ended or the
  // bound passed first.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds bound = progress_bound,
                       size_t count = 1) {
    bool ended = false;
    await(
        [&] {
          ended = wait(std::chrono::seconds(0)).has_value();
          return ended || count_of(output(), text) >= count;
        },
        bound);
    return count_of(output(), text) >= count;
  }

  // The exit code (128 + signal if killed by one), or nullopt if still running at the deadline.
  std::optional<int> wait(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exit_code_ && pid_ > 0) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_code_;
  }

  std::string output() const { return read_file(log_path_); }
  const std::string& log_path() const { return log_path_; }

 private:
  pid_t pid_ = -1;
  bool killed_ = false;
  std::optional<int> exit_code_;
  std::string log_path_;
};

// A JSON document (a job report, a console's --json table); discarded when it is not one.
inline troupe::json parse_json(const std::string& text) {
  return troupe::json::parse(text, nullptr, false);
}

// The strings of top-level list `key` of a JSON document (e.g. a report's workers_lost).
inline std::vector<std::string> json_strings(const std::string& text, const std::string& key) {
  const auto doc = parse_json(text);
  std::vector<std::string> out;
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_array()) return out;
  for (const auto& x : doc[key])
    if (x.is_string()) out.push_back(x.get<std::string>());
  return out;
}

// The number under `key` of a JSON document (a job report): a top-level key, or a path of
// keys and list indices joined by dots ("steps_by_stage.warmup", "workers.1.steps"); none
// when the text is not JSON or the path holds no number.
inline std::optional<double> json_number(const std::string& text, const std::string& key) {
  const auto doc = parse_json(text);
  if (!doc.is_object()) return std::nullopt;
  std::string pointer = "/" + key;
  for (auto& c : pointer)
    if (c == '.') c = '/';
  const troupe::json::json_pointer path(pointer);
  if (!doc.contains(path) || !doc.at(path).is_number()) return std::nullopt;
  return doc.at(path).get<double>();
}

}  // namespace troupe::testing
