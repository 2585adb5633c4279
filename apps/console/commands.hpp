// The console's commands: each asks the coordinator over the cluster handshake's connection
// and prints the answer (as a table, or JSON with --json). Used by troupe_console.cpp only.
#pragma once

#include <caf/scoped_actor.hpp>

#include <string>
#include <vector>

#include "messages/protocol.hpp"

namespace troupe::console {

extern const char* const command_help;

struct session {
  caf::scoped_actor& self;
  coordinator_actor coordinator;
  bool json = false;
  std::vector<std::string> history;
  std::string tls_dir;          // actions are signed with this directory's (operator) key
  std::string operator_secret;  // or proven with this secret, without TLS
};

// Runs one command line; false when it failed (the reason is printed on stderr).
bool run_command(session& s, const std::string& line);

}  // namespace troupe::console
