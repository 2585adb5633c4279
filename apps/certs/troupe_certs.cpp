// troupe-certs: makes a cluster's CA and issues the certificates --tls-dir expects.
//   troupe-certs init CA_DIR [--name NAME] [--days N]
//   troupe-certs issue CA_DIR NAME --out DIR [--operator] [--host H,...] [--days N]
// `issue` writes DIR/ca.pem, DIR/node.pem and DIR/node.key; give each node, console and
// operator its own. Keep CA_DIR (its ca.key signs certificates) off the cluster's machines.
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "apps/certs/certificates.hpp"
#include "troupe/error.hpp"
#include "troupe/options.hpp"

namespace {

constexpr const char* usage =
    "usage: troupe-certs init CA_DIR [--name NAME] [--days N]\n"
    "       troupe-certs issue CA_DIR NAME --out DIR [--operator] [--host H,...] [--days N]\n"
    "  init    makes CA_DIR/ca.key (mode 0600) and CA_DIR/ca.pem: the cluster's CA (10 years)\n"
    "  issue   writes DIR/ca.pem, DIR/node.pem and DIR/node.key (mode 0600): a P-256 key and\n"
    "          its certificate (1 year), what --tls-dir DIR expects\n"
    "  --operator  the holder may run console actions that change a job (drain, inject-fault,\n"
    "              checkpoint, log)\n"
    "  --host      names and IPv4 addresses the certificate also holds (for HTTPS clients such\n"
    "              as Prometheus, which check the server's name)\n";

int fail(const std::string& what) {
  fmt::print(stderr, "troupe-certs: {}\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace troupe;
  if (argc < 3) return fmt::print(stderr, "{}", usage), 2;
  const std::string command = argv[1];
  const std::string ca_dir = argv[2];
  certs::issue_request request;
  std::string out, ca_name = "troupe-ca";
  int days = 0;
  int first_flag = 3;
  if (command == "issue") {
    if (argc < 4) return fmt::print(stderr, "{}", usage), 2;
    request.name = argv[3];
    first_flag = 4;
  } else if (command != "init") {
    return fmt::print(stderr, "{}", usage), 2;
  }
  for (int i = first_flag; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--operator" && command == "issue") {
      request.is_operator = true;
      continue;
    }
    if (i + 1 >= argc) return fail(flag + " needs a value (or is not a flag of " + command + ")");
    const std::string value = argv[++i];
    if (flag == "--days") {
      days = std::atoi(value.c_str());
      if (days <= 0 || days > 36500) return fail("--days must be 1 to 36500");
    } else if (flag == "--out" && command == "issue")
      out = value;
    else if (flag == "--host" && command == "issue")
      request.hosts = split_list(value);
    else if (flag == "--name" && command == "init")
      ca_name = value;
    else
      return fail("unknown flag " + flag + " for " + command);
  }
  caf::error err;
  if (command == "init") {
    err = certs::make_ca(ca_dir, ca_name, days > 0 ? days : 3650);
    if (!err) fmt::print("made the CA in {} (keep {}/ca.key private)\n", ca_dir, ca_dir);
  } else {
    if (out.empty()) return fail("issue needs --out DIR");
    if (days > 0) request.days = days;
    err = certs::issue(ca_dir, out, request);
    if (!err)
      fmt::print("issued {} certificate '{}' to {} (ca.pem, node.pem, node.key)\n",
                 request.is_operator ? "an operator" : "a", request.name, out);
  }
  if (err) return fail(describe(err));
  return 0;
}
