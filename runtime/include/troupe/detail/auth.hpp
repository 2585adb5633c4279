// The cluster-secret handshake (HMAC-SHA256 challenge-response, OpenSSL). Both sides prove
// they know the secret without sending it: the gatekeeper proves it over the node's nonce, the
// node over the gatekeeper's nonce, its role and its name. Fresh nonces make replays useless.
// Pure functions; what this protects against (and what not) is in docs/SECURITY.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/values.hpp"

namespace troupe::auth {

constexpr size_t nonce_bytes = 32;

using bytes = std::vector<uint8_t>;

// SHA-256 of `size` bytes at `data` (checksums of checkpoint parts).
bytes sha256(const void* data, size_t size);

// Cryptographically random bytes (OpenSSL RAND_bytes); empty if the generator fails.
bytes random_nonce(size_t n = nonce_bytes);

bytes gatekeeper_proof(const std::string& secret, const bytes& node_nonce,
                       const bytes& gatekeeper_nonce);

bytes node_proof(const std::string& secret, const bytes& gatekeeper_nonce, const bytes& node_nonce,
                 role sender, const std::string& name);

// An HMAC of a console action's text (tls::action_text) under the operator secret: what an
// operator proves without TLS (--operator-secret, distinct from the cluster secret).
bytes operator_proof(const std::string& operator_secret, const bytes& text);

// Each field's length (8 bytes, little-endian) then its bytes: no two field lists encode alike.
bytes length_prefixed(const std::vector<std::string_view>& fields);

std::string_view view(const bytes& b);

// Constant-time comparison; false when lengths differ or either side is empty.
bool proofs_match(const bytes& expected, const bytes& received);

}  // namespace troupe::auth
