#include "troupe/detail/operator_proof.hpp"

#include "troupe/detail/auth.hpp"
#include "troupe/tls.hpp"

namespace troupe {

caf::expected<operator_action> prove_action(const std::string& nonce,
                                            std::vector<std::string> action,
                                            const std::string& tls_dir,
                                            const std::string& operator_secret) {
  operator_action out{nonce, std::move(action), {}, {}};
  const auto text = tls::action_text(auth::bytes(nonce.begin(), nonce.end()), out.action);
  if (!tls_dir.empty()) {
    auto certificate = tls::read_certificate(tls_dir);
    if (!certificate) return std::move(certificate.error());
    auto signature = tls::sign(tls_dir, text);
    if (!signature) return std::move(signature.error());
    out.certificate = std::move(*certificate);
    out.proof = std::move(*signature);
  } else if (!operator_secret.empty()) {
    out.proof = auth::operator_proof(operator_secret, text);
  }
  return out;
}

}  // namespace troupe
