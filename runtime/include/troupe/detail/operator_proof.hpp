// The console's half of an operator action (the coordinator's half is
// actors/supervision/admission/operator_gate.hpp): the action and its proof over the coordinator's
// nonce, signed with the key of `tls_dir` when there is one, an HMAC under `operator_secret`
// otherwise (no proof at all when neither is given: the coordinator then says what it needs).
// Called by troupe-console and by tests that act as an operator.
#pragma once

#include <caf/expected.hpp>

#include <string>
#include <vector>

#include "messages/types.hpp"

namespace troupe {

caf::expected<operator_action> prove_action(const std::string& nonce,
                                            std::vector<std::string> action,
                                            const std::string& tls_dir,
                                            const std::string& operator_secret);

}  // namespace troupe
