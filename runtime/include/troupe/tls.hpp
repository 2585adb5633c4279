// Mutual TLS material: the directory --tls-dir names (ca.pem, node.pem, node.key, as
// troupe-certs writes them), checked before any connection is made, and the operator proofs
// that signed console actions carry. caf_openssl reads the same files itself for every
// connection (and throws, aborting the process, when one is missing or unreadable), so every
// entry point calls check_tls_dir first: parse_launch_options does, troupe-console and
// troupe-bench do. Pure functions over OpenSSL; callable from anywhere.
#pragma once

#include <caf/expected.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::tls {

using bytes = std::vector<uint8_t>;

// The three files of a TLS directory.
struct paths {
  std::string ca;    // the cluster's CA certificate (PEM)
  std::string cert;  // this node's certificate, signed by that CA (PEM)
  std::string key;   // this node's private key (PEM, unencrypted, mode 0600)
};
paths files_in(const std::string& dir);

// What a checked certificate says about its holder.
struct identity {
  std::string name;          // the certificate's common name
  bool is_operator = false;  // issued with troupe-certs --operator (OU=operator)
  int64_t expires = 0;       // seconds since the epoch
};

// Loads and checks the directory: every file parses, the key is not readable by group or
// others, it matches the certificate, and the certificate verifies against the CA now.
// errc::bad_configuration naming the file and what is wrong otherwise.
caf::expected<identity> check_dir(const std::string& dir);

// Checks a PEM certificate sent by a peer against the CA of `dir`: errc::authentication_failed
// when it does not verify (another CA, expired, not a certificate).
caf::expected<identity> check_peer(const std::string& dir, const std::string& certificate_pem);

// The text an operator signs for one console action: a fixed label, the coordinator's fresh
// nonce, then the action and its arguments, each length-prefixed.
bytes action_text(const bytes& nonce, const std::vector<std::string>& action);

// Signs `text` with the key of `dir` (SHA-256; the key's own scheme for Ed25519).
caf::expected<bytes> sign(const std::string& dir, const bytes& text);

// True when `signature` over `text` verifies with the public key of `certificate_pem`.
bool verify(const std::string& certificate_pem, const bytes& text, const bytes& signature);

// Does nothing; calling it links runtime/src/openssl_call_guards.cpp into the binary, whose
// wrappers of SSL_read/write/connect/accept/shutdown keep caf_openssl's connections alive after
// another one's handshake failed and turn a write to a peer that hung up into an error, not
// SIGPIPE.
void guard_openssl_calls();

// The PEM text of the certificate in `dir` (what a signed action carries).
caf::expected<std::string> read_certificate(const std::string& dir);

}  // namespace troupe::tls
