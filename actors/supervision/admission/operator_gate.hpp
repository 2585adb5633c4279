// operator_gate: what a coordinator checks before a console action that changes the job
// (inject-fault, drain, checkpoint, log). The console asks for a nonce, then sends the action
// with a proof over tls::action_text(nonce, action): with --tls-dir, a signature by the key
// of an operator certificate (troupe-certs issue --operator) from the cluster's CA; without
// it, an HMAC under --operator-secret. Views (inspect) need no proof: membership suffices.
// Nonces are single-use, expire, and are bounded in number. Owned by one actor's state.
#pragma once

#include <caf/expected.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "messages/codec.hpp"
#include "messages/types.hpp"

namespace troupe {

class operator_gate {
 public:
  operator_gate(std::string tls_dir, std::string operator_secret)
      : tls_dir_(std::move(tls_dir)), operator_secret_(std::move(operator_secret)) {}

  // A fresh nonce (hex) for one action; the oldest pending ones make room.
  std::string fresh_nonce();

  // The action, when its nonce is pending (it is used up either way) and its proof holds;
  // errc::authentication_failed saying why otherwise.
  caf::expected<std::vector<std::string>> check(const operator_action& a);
  // The same for an action as it came off the wire (an operate request's): a malformed one is
  // refused as the codec says.
  caf::expected<std::vector<std::string>> check(const wire& w);

  static constexpr size_t max_pending = 64;
  static constexpr std::chrono::seconds nonce_ttl{60};

 private:
  std::string tls_dir_;
  std::string operator_secret_;
  std::map<std::string, std::chrono::steady_clock::time_point> pending_;  // nonce -> expiry
};

}  // namespace troupe
