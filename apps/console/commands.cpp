#include "console/commands.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <optional>
#include "console/render.hpp"
#include "troupe/detail/operator_proof.hpp"
#include "troupe/error.hpp"

namespace troupe::console {

const char* const command_help =
    "commands:\n"
    "  nodes                 every node: role, address, uptime, heartbeat age, CPU, memory\n"
    "  tree                  the supervision tree: state, restarts, mailbox of every actor\n"
    "  workers               clock, steps, steps/s, utilization, last loss of every worker\n"
    "  buckets               placement, version, staleness, vector clock, bytes per bucket\n"
    "  group                 --mode dp: generation, members, hosts, steps, allreduce bytes,\n"
    "                        time and the fraction hidden behind backward\n"
    "  timeline              the job's events: losses, takeovers, epochs, checkpoints,\n"
    "                        restarts, drains\n"
    "  metrics [PREFIX]      every node's metrics (families starting with PREFIX)\n"
    "  diag                  update variance, loss oscillation, effective update ratio\n"
    "  top [N]               workers, buckets and diag every second until a key (or N times)\n"
    "  checkpoint            take a checkpoint now (--checkpoint-dir jobs)\n"
    "  inject-fault ACTOR    crash bucket-N, a server or a worker on purpose\n"
    "  drain NODE            a worker or server leaves cleanly; its work moves elsewhere\n"
    "  log LEVEL [NODE]      error|warn|info|debug on every node (or one)\n"
    "  export-curve FILE     write loss, accuracy and staleness over time as CSV\n"
    "  history | help | quit\n"
    "checkpoint, inject-fault, drain and log change the job: they need an operator\n"
    "certificate (--tls-dir) or, without TLS, the coordinator's --operator-secret.\n";

namespace {

// Longer than the coordinator's own request timeout (30 s by default): a drain or a checkpoint
// waits on requests of its own, and its answer should arrive rather than our timeout.
constexpr auto timeout = std::chrono::seconds(90);

// The terminal in raw mode (keys one by one, no echo) while it lives; restored when it goes,
// also if top is left by an error. Ctrl-C arrives as a key like any other (ISIG off), so it
// stops top without killing the console in raw mode; keys typed during top are dropped so that
// they do not end up in the next command.
class raw_terminal {
 public:
  raw_terminal() {
    if (::tcgetattr(0, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~(ICANON | ECHO | ISIG);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    active_ = ::tcsetattr(0, TCSANOW, &raw) == 0;
  }
  ~raw_terminal() {
    if (!active_) return;
    ::tcflush(0, TCIFLUSH);
    ::tcsetattr(0, TCSANOW, &saved_);
  }
  raw_terminal(const raw_terminal&) = delete;
  raw_terminal& operator=(const raw_terminal&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

void print_error(caf::error& err) {
  fmt::print(stderr, "error: {}\n", describe(err));
}

// Asks for a view; the table, or none (the reason printed).
std::optional<table_view> view(session& s, const std::string& name) {
  std::optional<table_view> out;
  s.self->request(s.coordinator, timeout, inspect_atom_v, name)
      .receive(
          [&](const wire& w) {
            auto table = decode<table_view>(w);
            if (!table) return fmt::print(stderr, "error: {}\n", describe(table.error()));
            out = std::move(*table);
          },
          print_error);
  return out;
}

// Sends an action that changes the job, proven as an operator (a fresh nonce first), and
// prints the sentence that answers it.
bool act(session& s, std::vector<std::string> action) {
  std::optional<std::string> nonce;
  s.self->request(s.coordinator, timeout, nonce_atom_v)
      .receive([&](std::string& n) { nonce = std::move(n); }, print_error);
  if (!nonce) return false;
  auto proven = prove_action(*nonce, std::move(action), s.tls_dir, s.operator_secret);
  if (!proven) return print_error(proven.error()), false;
  bool ok = false;
  s.self->request(s.coordinator, timeout, operate_atom_v, encode(*proven))
      .receive([&](const std::string& done) { fmt::print("{}\n", done), ok = true; }, print_error);
  return ok;
}

bool show(session& s, const std::string& name) {
  auto table = view(s, name);
  if (table) std::cout << (s.json ? as_json(*table) : as_table(*table)) << std::flush;
  return table.has_value();
}

bool metrics(session& s, const std::string& prefix) {
  auto table = view(s, "metrics");
  if (!table) return false;
  std::cout << (s.json ? as_json(with_family_prefix(*table, prefix))
                       : as_exposition(*table, prefix))
            << std::flush;
  return true;
}

bool export_curve(session& s, const std::string& path) {
  auto table = view(s, "curve");
  if (!table) return false;
  std::ofstream out{path, std::ios::trunc};
  out << as_csv(*table);
  out.close();
  if (!out) return fmt::print(stderr, "error: cannot write {}\n", path), false;
  fmt::print("wrote {} points to {}\n", table->rows.size(), path);
  return true;
}

// Waits up to a second for a key on the terminal; true when one was pressed.
bool key_within_a_second() {
  pollfd fd{0, POLLIN, 0};
  if (::poll(&fd, 1, 1000) <= 0) return false;
  char c;
  return ::read(0, &c, 1) >= 0;
}

// Workers, buckets and diag, refreshed every second: until a key is pressed on a terminal, or
// `count` times.
bool top(session& s, const std::string& argument) {
  const bool terminal = ::isatty(0) && ::isatty(1);
  const long count = argument.empty() ? 0 : std::strtol(argument.c_str(), nullptr, 10);
  if (!argument.empty() && count <= 0)
    return fmt::print(stderr, "error: top N needs a positive count\n"), false;
  if (count == 0 && !terminal)
    return fmt::print(stderr, "error: top needs a terminal, or a count: top N\n"), false;
  std::optional<raw_terminal> raw;
  if (terminal) raw.emplace();
  bool ok = true;
  for (long i = 0; count == 0 || i < count; ++i) {
    if (terminal) std::cout << "\033[H\033[2J";
    std::cout << fmt::format("troupe top: refresh {}{}\n\n", i + 1,
                             terminal ? " (press a key to stop)" : "");
    for (const char* name : {"workers", "buckets", "diag"}) {
      ok = show(s, name) && ok;
      std::cout << "\n";
    }
    std::cout << std::flush;
    if (count != 0 && i + 1 == count) break;
    if (!terminal)
      std::this_thread::sleep_for(std::chrono::seconds(1));
    else if (key_within_a_second())
      break;
  }
  return ok;
}

}  // namespace

bool run_command(session& s, const std::string& line) {
  std::istringstream words{line};
  std::string command, argument, extra;
  words >> command >> argument >> extra;
  if (command.empty()) return true;
  if (s.history.size() >= 1000) s.history.erase(s.history.begin());  // bounded
  s.history.push_back(line);
  auto needs = [&](const char* usage) {
    if (!argument.empty()) return true;
    fmt::print(stderr, "error: usage: {}\n", usage);
    return false;
  };
  if (command == "help") return std::cout << command_help, true;
  if (command == "history") {
    for (size_t i = 0; i < s.history.size(); ++i) fmt::print("{:>4}  {}\n", i + 1, s.history[i]);
    return true;
  }
  if (command == "nodes" || command == "tree" || command == "workers" || command == "buckets" ||
      command == "diag" || command == "group" || command == "timeline")
    return show(s, command);
  if (command == "metrics") return metrics(s, argument);
  if (command == "top") return top(s, argument);
  if (command == "checkpoint") return act(s, {command});
  if (command == "inject-fault") return needs("inject-fault ACTOR") && act(s, {command, argument});
  if (command == "drain") return needs("drain NODE") && act(s, {command, argument});
  if (command == "log") return needs("log LEVEL [NODE]") && act(s, {command, argument, extra});
  if (command == "export-curve") return needs("export-curve FILE.csv") && export_curve(s, argument);
  fmt::print(stderr, "error: unknown command '{}' (try help)\n", command);
  return false;
}

}  // namespace troupe::console
