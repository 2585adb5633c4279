#include "actors/supervision/admission/operator_gate.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "messages/codec.hpp"
#include "troupe/detail/auth.hpp"
#include "troupe/error.hpp"
#include "troupe/tls.hpp"

namespace troupe {

namespace {

std::string hex(const std::vector<uint8_t>& b) {
  std::string out;
  for (auto x : b) out += fmt::format("{:02x}", x);
  return out;
}

caf::error refused(const std::string& why) {
  return make_error(errc::authentication_failed, "operator action refused: " + why);
}

}  // namespace

std::string operator_gate::fresh_nonce() {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(pending_, [&](const auto& kv) { return kv.second < now; });
  while (pending_.size() >= max_pending)
    pending_.erase(std::min_element(pending_.begin(), pending_.end(),
                                    [](auto& a, auto& b) { return a.second < b.second; }));
  std::string nonce = hex(auth::random_nonce());
  if (nonce.empty()) return nonce;  // no random bytes: nothing can be proven with it
  pending_[nonce] = now + nonce_ttl;
  return nonce;
}

caf::expected<std::vector<std::string>> operator_gate::check(const operator_action& a) {
  auto it = pending_.find(a.nonce);
  if (it == pending_.end() || it->second < std::chrono::steady_clock::now()) {
    if (it != pending_.end()) pending_.erase(it);
    return refused("unknown or expired nonce (ask for a fresh one)");
  }
  pending_.erase(it);  // one action per nonce: replays find nothing
  if (a.action.empty()) return refused("no action");
  const auto text = tls::action_text(auth::bytes(a.nonce.begin(), a.nonce.end()), a.action);
  if (!tls_dir_.empty()) {
    if (a.certificate.empty())
      return refused(
          "this job runs with --tls-dir: actions need an operator certificate "
          "(troupe-certs issue --operator), given to the console with --tls-dir");
    auto holder = tls::check_peer(tls_dir_, a.certificate);
    if (!holder) return refused(describe(holder.error()));
    if (!holder->is_operator)
      return refused(
          fmt::format("the certificate of '{}' is not an operator's (troupe-certs "
                      "issue --operator)",
                      holder->name));
    if (!tls::verify(a.certificate, text, a.proof))
      return refused("the signature does not match the certificate");
    return a.action;
  }
  if (operator_secret_.empty())
    return refused(
        "this coordinator has no --operator-secret (or TROUPE_OPERATOR_SECRET), so "
        "it takes no actions that change the job");
  if (!auth::proofs_match(auth::operator_proof(operator_secret_, text), a.proof))
    return refused("wrong operator secret");
  return a.action;
}

caf::expected<std::vector<std::string>> operator_gate::check(const wire& w) {
  auto proven = decode<operator_action>(w);
  if (!proven) return std::move(proven.error());
  return check(*proven);
}

}  // namespace troupe
