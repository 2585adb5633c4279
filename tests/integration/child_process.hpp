// Test helpers: start a program as a child process with its output in a file, wait for it with
// a deadline, and make sure it is gone when the test ends (the destructor kills it). Also picks
// a free loopback port, fetches a page over HTTP on loopback and reads numbers from JSON text.
// For tests only.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
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
  void kill() { signal(SIGKILL); }

  // Sends any signal (SIGSTOP freezes the process while its sockets stay open).
  void signal(int number) {
    if (pid_ > 0 && !exit_code_) ::kill(pid_, number);
  }

  // Waits until the output contains `text`; false if the process ended or time ran out first.
  bool wait_for_output(const std::string& text, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (output().find(text) != std::string::npos) return true;
      if (wait(std::chrono::seconds(0))) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
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

  std::string output() const {
    std::ifstream in(log_path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string log_path_;
};

// A loopback port that was free a moment ago.
// A path for `name` in this test process's own temporary directory.
inline std::filesystem::path scratch(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("troupe-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

inline uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A socket connected to 127.0.0.1:port, or -1 when nobody listens there.
inline int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// Sends all of `bytes` on `fd` (MSG_NOSIGNAL: a peer that hung up is not SIGPIPE); false when
// the connection failed first.
inline bool send_all(int fd, const char* bytes, size_t size) {
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = ::send(fd, bytes + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// The whole HTTP response to GET `path` on 127.0.0.1:port (empty when nobody answers).
inline std::string http_get(uint16_t port, const std::string& path) {
  const int fd = connect_loopback(port);
  if (fd < 0) return "";
  std::string out;
  const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
  if (send_all(fd, request.data(), request.size())) {
    char buffer[4096];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) out.append(buffer, n);
  }
  ::close(fd);
  return out;
}

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

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Waits (bounded) until the file at `path` (a process's log) holds `text`.
inline bool wait_for_text(const std::string& path, const std::string& text,
                          std::chrono::seconds bound = std::chrono::seconds(180)) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_file(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace troupe::testing
