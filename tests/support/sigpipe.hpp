// Test helper: Gloo writes to its sockets without MSG_NOSIGNAL, so a member that went away must
// give the others an error, not kill the test with SIGPIPE (run_app ignores it for every node).
// A test module registers it: `using troupe::testing::ignore_sigpipe;` then
// `BOOST_TEST_GLOBAL_FIXTURE(ignore_sigpipe);`. For tests only.
#pragma once

#include <csignal>

namespace troupe::testing {

struct ignore_sigpipe {
  ignore_sigpipe() { std::signal(SIGPIPE, SIG_IGN); }
};

}  // namespace troupe::testing
