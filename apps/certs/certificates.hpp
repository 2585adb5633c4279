// troupe-certs' work: a cluster CA and the certificates it issues to nodes, consoles and
// operators, made with OpenSSL's library. Keys are ECDSA P-256, signatures SHA-256; the CA
// lives 10 years by default, what it issues 1 year. Keys are written mode 0600 in directories
// made mode 0700; nothing existing is overwritten. Called by troupe_certs.cpp only.
#pragma once

#include <caf/error.hpp>

#include <string>
#include <vector>

namespace troupe::certs {

struct issue_request {
  std::string name;                // the common name (a node's --name, "console", a person)
  bool is_operator = false;        // OU=operator: may run console actions that change a job
  std::vector<std::string> hosts;  // extra subjectAltNames (DNS names or IPv4 addresses)
  int days = 365;
};

// Makes `ca_dir` with ca.key and ca.pem (a self-signed CA named `name`).
caf::error make_ca(const std::string& ca_dir, const std::string& name, int days);

// Writes out_dir/ca.pem, out_dir/node.pem and out_dir/node.key: a new key and a certificate
// for it signed by the CA in `ca_dir`.
caf::error issue(const std::string& ca_dir, const std::string& out_dir, const issue_request& r);

}  // namespace troupe::certs
