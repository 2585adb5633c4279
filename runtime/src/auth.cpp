#include "troupe/detail/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace troupe::auth {

namespace {

// HMAC-SHA256 over length-prefixed fields, so that no two field lists share an encoding.
bytes hmac(const std::string& secret, const std::vector<std::string_view>& fields) {
  const bytes message = length_prefixed(fields);
  bytes out(EVP_MAX_MD_SIZE);
  unsigned length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message.data(), message.size(),
       out.data(), &length);
  out.resize(length);
  return out;
}

}  // namespace

std::string_view view(const bytes& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

bytes length_prefixed(const std::vector<std::string_view>& fields) {
  bytes message;
  for (auto field : fields) {
    const uint64_t n = field.size();
    for (int i = 0; i < 8; ++i) message.push_back(static_cast<uint8_t>((n >> (8 * i)) & 0xff));
    message.insert(message.end(), field.begin(), field.end());
  }
  return message;
}

bytes sha256(const void* data, size_t size) {
  bytes out(EVP_MAX_MD_SIZE);
  unsigned length = 0;
  EVP_Digest(data, size, out.data(), &length, EVP_sha256(), nullptr);
  out.resize(length);
  return out;
}

bytes random_nonce(size_t n) {
  bytes out(n);
  if (RAND_bytes(out.data(), static_cast<int>(n)) != 1) return {};
  return out;
}

bytes gatekeeper_proof(const std::string& secret, const bytes& node_nonce,
                       const bytes& gatekeeper_nonce) {
  return hmac(secret, {"troupe-gatekeeper-v1", view(node_nonce), view(gatekeeper_nonce)});
}

bytes node_proof(const std::string& secret, const bytes& gatekeeper_nonce, const bytes& node_nonce,
                 role sender, const std::string& name) {
  const std::string role_name = to_string(sender);
  return hmac(secret,
              {"troupe-node-v1", view(gatekeeper_nonce), view(node_nonce), role_name, name});
}

bytes operator_proof(const std::string& operator_secret, const bytes& text) {
  return hmac(operator_secret, {"troupe-operator-secret-v1", view(text)});
}

bool proofs_match(const bytes& expected, const bytes& received) {
  if (expected.empty() || expected.size() != received.size()) return false;
  return CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

}  // namespace troupe::auth
