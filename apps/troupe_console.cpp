// troupe-console: inspect and operate a running job. Connects to the coordinator with the
// cluster handshake (the same secret as the nodes) and shows the nodes, workers and buckets
// as tables or JSON; `inject-fault ACTOR` crashes an actor on purpose. `-c "CMD"` runs one
// command and exits; without it, an interactive prompt reads commands from stdin.
#include <fmt/format.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <cstdlib>
#include <iostream>
#include <sstream>

#include "messages/protocol.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"

namespace {

using namespace troupe;

constexpr const char* usage =
    "usage: troupe-console [--connect HOST:PORT] [--secret S] [-c \"CMD\"] [--json]\n"
    "  --connect HOST:PORT  the coordinator (default 127.0.0.1:7600)\n"
    "  --secret S           the cluster secret (default: TROUPE_SECRET)\n"
    "  -c CMD               run one command and exit\n"
    "  --json               print tables as JSON arrays of objects\n"
    "commands: nodes | tree | workers | buckets | inject-fault ACTOR | history | help | quit\n";

struct console_options {
  launch_options node;  // coordinator address, secret, timeouts
  std::string command;
  bool json = false;
};

// Parses the command line; an error text when it does not make sense.
std::optional<std::string> parse(int argc, char** argv, console_options& o) {
  if (const char* s = std::getenv("TROUPE_SECRET")) o.node.secret = s;
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
    } else if (arg == "--connect" || arg == "--secret" || arg == "-c") {
      auto v = value();
      if (!v) return arg + " needs a value";
      if (arg == "-c") o.command = *v;
      if (arg == "--secret") o.node.secret = *v;
      if (arg == "--connect") {
        auto hp = parse_host_port(*v);
        if (!hp) return "--connect: " + describe(hp.error());
        o.node.coordinator = *hp;
      }
    } else {
      return "unknown argument " + arg;
    }
  }
  if (o.node.secret.empty()) return "give the cluster secret with --secret or TROUPE_SECRET";
  return std::nullopt;
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

std::string as_json(const table_view& t) {
  std::string out = "[";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    out += r ? ",\n {" : "\n {";
    for (size_t c = 0; c < t.columns.size(); ++c) {
      const auto& cell = t.rows[r][c];
      out += fmt::format("{}{}: {}", c ? ", " : "", json_string(t.columns[c]),
                         cell == "-"       ? "null"
                         : is_number(cell) ? cell
                                           : json_string(cell));
    }
    out += "}";
  }
  return out + (t.rows.empty() ? "]\n" : "\n]\n");
}

std::string as_table(const table_view& t) {
  std::vector<size_t> width(t.columns.size());
  for (size_t c = 0; c < t.columns.size(); ++c) width[c] = t.columns[c].size();
  for (const auto& row : t.rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c + 1 < cells.size(); ++c)
      out += fmt::format("{:<{}}  ", cells[c], width[c]);
    return out + (cells.empty() ? "" : cells.back()) + "\n";
  };
  std::string out = line(t.columns);
  for (const auto& row : t.rows) out += line(row);
  return out;
}

// Runs one command; false when it failed (the reason is printed).
bool run(caf::scoped_actor& self, const coordinator_actor& coordinator, const std::string& line,
         bool json, std::vector<std::string>& history) {
  std::istringstream words{line};
  std::string command, argument;
  words >> command >> argument;
  if (command.empty()) return true;
  history.push_back(line);
  if (command == "help") return std::cout << usage, true;
  if (command == "history") {
    for (size_t i = 0; i < history.size(); ++i) fmt::print("{:>4}  {}\n", i + 1, history[i]);
    return true;
  }
  bool ok = false;
  const auto timeout = std::chrono::seconds(30);
  auto failed = [&](caf::error& err) { fmt::print(stderr, "error: {}\n", describe(err)); };
  if (command == "inject-fault") {
    if (argument.empty()) return fmt::print(stderr, "error: inject-fault ACTOR\n"), false;
    self->request(coordinator, timeout, fault_atom_v, argument)
        .receive([&](const std::string& done) { fmt::print("{}\n", done), ok = true; }, failed);
    return ok;
  }
  if (command != "nodes" && command != "tree" && command != "workers" && command != "buckets")
    return fmt::print(stderr, "error: unknown command '{}' (try help)\n", command), false;
  self->request(coordinator, timeout, inspect_atom_v, command)
      .receive(
          [&](const wire& w) {
            auto table = decode<table_view>(w);
            if (!table) return fmt::print(stderr, "error: {}\n", describe(table.error()));
            std::cout << (json ? as_json(*table) : as_table(*table));
            ok = true;
          },
          failed);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  console_options o;
  if (auto problem = parse(argc, argv, o)) {
    if (problem->empty()) return std::cout << usage, 0;
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
    fmt::print(stderr, "troupe-console: cannot connect to {}: {}\n", to_string(o.node.coordinator),
               describe(coordinator.error()));
    return 1;
  }
  caf::scoped_actor self{sys};
  std::vector<std::string> history;
  if (!o.command.empty()) return run(self, *coordinator, o.command, o.json, history) ? 0 : 1;
  const bool terminal = ::isatty(0);
  for (std::string line;;) {
    if (terminal) std::cout << "troupe> " << std::flush;
    if (!std::getline(std::cin, line) || line == "quit" || line == "exit") break;
    run(self, *coordinator, line, o.json, history);
  }
  return 0;
}
