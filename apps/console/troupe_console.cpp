// troupe-console: inspect and operate a running job. Connects to the coordinator with the
// cluster handshake (the same secret as the nodes); the commands are in commands.cpp.
// `-c "CMD"` runs one command and exits; without it, commands are read from stdin: at a
// terminal through libedit's prompt (line editing, history kept in ~/.troupe_console_history,
// at most history_lines lines), otherwise line by line.
#include <fmt/format.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <editline/readline.h>

#include <cstdlib>
#include <iostream>
#include <sstream>

#include "console/commands.hpp"
#include "messages/protocol.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"
#include "troupe/tls.hpp"

namespace {

using namespace troupe;

constexpr const char* usage =
    "usage: troupe-console [--connect HOST:PORT] [--secret S] [--tls-dir DIR]\n"
    "                      [--operator-secret S] [-c \"CMD\"] [--json]\n"
    "  --connect HOST:PORT  the coordinator (default 127.0.0.1:7600)\n"
    "  --secret S           the cluster secret (default: TROUPE_SECRET)\n"
    "  --tls-dir DIR        mutual TLS, as the job's nodes (default: TROUPE_TLS_DIR); actions\n"
    "                       that change the job need an operator certificate there\n"
    "  --operator-secret S  without TLS: proves those actions (default: TROUPE_OPERATOR_SECRET)\n"
    "  -c CMD               run one command and exit\n"
    "  --json               print tables as JSON arrays of objects\n";

struct console_options {
  launch_options node;  // coordinator address, secret, timeouts
  std::string command;
  bool json = false;
};

// Parses the command line; an error text when it does not make sense.
std::optional<std::string> parse(int argc, char** argv, console_options& o) {
  if (const char* s = std::getenv("TROUPE_SECRET")) o.node.secret = s;
  if (const char* s = std::getenv("TROUPE_TLS_DIR")) o.node.tls_dir = s;
  if (const char* s = std::getenv("TROUPE_OPERATOR_SECRET")) o.node.operator_secret = s;
  o.node.join_timeout = std::chrono::seconds(5);
  o.node.threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string{argv[++i]};
    };
    if (arg == "--json") {
      o.json = true;
    } else if (arg == "--help" || arg == "-h") {
      return std::string{};
    } else if (arg == "--connect" || arg == "--secret" || arg == "-c" || arg == "--tls-dir" ||
               arg == "--operator-secret") {
      auto v = value();
      if (!v) return arg + " needs a value";
      if (arg == "-c") o.command = *v;
      if (arg == "--secret") o.node.secret = *v;
      if (arg == "--tls-dir") o.node.tls_dir = *v;
      if (arg == "--operator-secret") o.node.operator_secret = *v;
      if (arg == "--connect") {
        auto hp = parse_host_port(*v);
        if (!hp) return "--connect: " + describe(hp.error());
        o.node.coordinators = {*hp};
      }
    } else {
      return "unknown argument " + arg;
    }
  }
  if (o.node.secret.empty()) return "give the cluster secret with --secret or TROUPE_SECRET";
  if (!o.node.tls_dir.empty())
    if (auto checked = tls::check_dir(o.node.tls_dir); !checked) return describe(checked.error());
  return std::nullopt;
}

constexpr int history_lines = 500;

std::string history_file() {
  const char* home = std::getenv("HOME");
  return home && *home ? std::string{home} + "/.troupe_console_history" : std::string{};
}

// Commands typed at a terminal, with line editing and history, until quit, exit or EOF.
void prompt_loop(console::session& session) {
  const std::string history = history_file();
  stifle_history(history_lines);
  if (!history.empty()) read_history(history.c_str());
  while (char* typed = readline("troupe> ")) {
    const std::string line{typed};
    std::free(typed);
    if (line == "quit" || line == "exit") break;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    add_history(line.c_str());
    console::run_command(session, line);
  }
  if (!history.empty()) write_history(history.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  console_options o;
  if (auto problem = parse(argc, argv, o)) {
    if (problem->empty()) return std::cout << usage << console::command_help, 0;
    fmt::print(stderr, "troupe-console: {}\n{}", *problem, usage);
    return 2;
  }
  caf::actor_system_config cfg;
  configure_actor_system(cfg, o.node);
  caf::actor_system sys{cfg};
  const logger quiet{"console", log_level::error};
  auto coordinator =
      join_cluster(sys, o.node, role::console, "console-" + std::to_string(::getpid()), quiet);
  if (!coordinator) {
    fmt::print(stderr, "troupe-console: cannot connect to {}: {}\n", to_string(o.node.coordinators),
               describe(coordinator.error()));
    return 1;
  }
  caf::scoped_actor self{sys};
  console::session session{self, *coordinator, o.json, {}, o.node.tls_dir, o.node.operator_secret};
  if (!o.command.empty()) return console::run_command(session, o.command) ? 0 : 1;
  if (::isatty(0)) {
    prompt_loop(session);
    return 0;
  }
  for (std::string line; std::getline(std::cin, line) && line != "quit" && line != "exit";)
    console::run_command(session, line);
  return 0;
}
