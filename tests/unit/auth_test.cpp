// Unit tests of the cluster-secret handshake primitives (troupe/auth.hpp): proofs are
// deterministic in their inputs and change with each of them, the comparison rejects empty and
// differently sized proofs, and nonces are fresh 32-byte values.
#define BOOST_TEST_MODULE auth
#include <boost/test/unit_test.hpp>

#include "troupe/detail/auth.hpp"

namespace auth = troupe::auth;
using troupe::role;

namespace {

const auth::bytes node_nonce(32, 0x11);
const auth::bytes gate_nonce(32, 0x22);

}  // namespace

BOOST_AUTO_TEST_CASE(nonce_has_32_bytes_by_default) {
  BOOST_TEST(auth::nonce_bytes == 32u);
  BOOST_TEST(auth::random_nonce().size() == 32u);
}

BOOST_AUTO_TEST_CASE(nonce_honours_requested_length) {
  BOOST_TEST(auth::random_nonce(16).size() == 16u);
}

BOOST_AUTO_TEST_CASE(nonces_differ) {
  const auto a = auth::random_nonce();
  const auto b = auth::random_nonce();
  BOOST_TEST((a != b));
  BOOST_TEST((a != auth::bytes(32, 0)));
}

BOOST_AUTO_TEST_CASE(gatekeeper_proof_is_hmac_sha256_sized) {
  BOOST_TEST(auth::gatekeeper_proof("s", node_nonce, gate_nonce).size() == 32u);
  BOOST_TEST(auth::node_proof("s", gate_nonce, node_nonce, role::worker, "w").size() == 32u);
}

BOOST_AUTO_TEST_CASE(gatekeeper_proof_same_inputs_match) {
  const auto a = auth::gatekeeper_proof("secret", node_nonce, gate_nonce);
  const auto b = auth::gatekeeper_proof("secret", node_nonce, gate_nonce);
  BOOST_TEST((a == b));
  BOOST_TEST(auth::proofs_match(a, b));
}

BOOST_AUTO_TEST_CASE(gatekeeper_proof_differs_for_other_secret) {
  BOOST_TEST(!auth::proofs_match(auth::gatekeeper_proof("secret", node_nonce, gate_nonce),
                                 auth::gatekeeper_proof("secreT", node_nonce, gate_nonce)));
}

BOOST_AUTO_TEST_CASE(gatekeeper_proof_differs_for_other_nonces) {
  const auto base = auth::gatekeeper_proof("secret", node_nonce, gate_nonce);
  auth::bytes other = node_nonce;
  other.back() ^= 1;
  BOOST_TEST(!auth::proofs_match(base, auth::gatekeeper_proof("secret", other, gate_nonce)));
  BOOST_TEST(!auth::proofs_match(base, auth::gatekeeper_proof("secret", node_nonce, other)));
  // Swapping the two nonces is a different message.
  BOOST_TEST(!auth::proofs_match(base, auth::gatekeeper_proof("secret", gate_nonce, node_nonce)));
}

BOOST_AUTO_TEST_CASE(node_proof_same_inputs_match) {
  const auto a = auth::node_proof("secret", gate_nonce, node_nonce, role::worker, "worker-1");
  const auto b = auth::node_proof("secret", gate_nonce, node_nonce, role::worker, "worker-1");
  BOOST_TEST(auth::proofs_match(a, b));
}

BOOST_AUTO_TEST_CASE(node_proof_differs_for_other_secret) {
  BOOST_TEST(
      !auth::proofs_match(auth::node_proof("secret", gate_nonce, node_nonce, role::worker, "w"),
                          auth::node_proof("other", gate_nonce, node_nonce, role::worker, "w")));
}

BOOST_AUTO_TEST_CASE(node_proof_differs_for_other_nonce) {
  auth::bytes other = gate_nonce;
  other.front() ^= 0x80;
  const auto base = auth::node_proof("secret", gate_nonce, node_nonce, role::worker, "w");
  BOOST_TEST(
      !auth::proofs_match(base, auth::node_proof("secret", other, node_nonce, role::worker, "w")));
  BOOST_TEST(
      !auth::proofs_match(base, auth::node_proof("secret", gate_nonce, other, role::worker, "w")));
}

BOOST_AUTO_TEST_CASE(node_proof_differs_for_other_role) {
  const auto worker = auth::node_proof("secret", gate_nonce, node_nonce, role::worker, "n");
  const auto server = auth::node_proof("secret", gate_nonce, node_nonce, role::server, "n");
  const auto coord = auth::node_proof("secret", gate_nonce, node_nonce, role::coordinator, "n");
  BOOST_TEST(!auth::proofs_match(worker, server));
  BOOST_TEST(!auth::proofs_match(worker, coord));
  BOOST_TEST(!auth::proofs_match(server, coord));
}

BOOST_AUTO_TEST_CASE(node_proof_differs_for_other_name) {
  BOOST_TEST(!auth::proofs_match(
      auth::node_proof("secret", gate_nonce, node_nonce, role::worker, "worker-1"),
      auth::node_proof("secret", gate_nonce, node_nonce, role::worker, "worker-2")));
}

BOOST_AUTO_TEST_CASE(fields_are_length_prefixed) {
  // Moving a byte from one nonce to the other keeps the concatenation but not the proof.
  BOOST_TEST(!auth::proofs_match(auth::gatekeeper_proof("secret", {1, 2}, {3}),
                                 auth::gatekeeper_proof("secret", {1}, {2, 3})));
  BOOST_TEST(!auth::proofs_match(auth::node_proof("secret", {1, 2}, {3}, role::worker, "n"),
                                 auth::node_proof("secret", {1}, {2, 3}, role::worker, "n")));
}

BOOST_AUTO_TEST_CASE(node_and_gatekeeper_proofs_differ) {
  BOOST_TEST(
      !auth::proofs_match(auth::gatekeeper_proof("secret", node_nonce, gate_nonce),
                          auth::node_proof("secret", gate_nonce, node_nonce, role::worker, "")));
}

BOOST_AUTO_TEST_CASE(proofs_match_equal_bytes) {
  BOOST_TEST(auth::proofs_match({1, 2, 3}, {1, 2, 3}));
}

BOOST_AUTO_TEST_CASE(proofs_match_rejects_one_differing_byte) {
  BOOST_TEST(!auth::proofs_match({1, 2, 3}, {1, 2, 4}));
  BOOST_TEST(!auth::proofs_match({0, 2, 3}, {1, 2, 3}));
}

BOOST_AUTO_TEST_CASE(proofs_match_rejects_empty) {
  BOOST_TEST(!auth::proofs_match({}, {}));
  BOOST_TEST(!auth::proofs_match({}, {1}));
  BOOST_TEST(!auth::proofs_match({1}, {}));
}

BOOST_AUTO_TEST_CASE(proofs_match_rejects_different_lengths) {
  BOOST_TEST(!auth::proofs_match({1, 2, 3}, {1, 2}));
  BOOST_TEST(!auth::proofs_match({1, 2}, {1, 2, 3}));
  const auto proof = auth::gatekeeper_proof("secret", node_nonce, gate_nonce);
  auth::bytes truncated(proof.begin(), proof.end() - 1);
  BOOST_TEST(!auth::proofs_match(proof, truncated));
}
