#include "apps/certs/certificates.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "troupe/detail/openssl_ptr.hpp"
#include "troupe/error.hpp"

namespace troupe::certs {

namespace {

using detail::openssl_ptr;
using detail::read_pem;
using x509_ptr = openssl_ptr<X509>;
using key_ptr = openssl_ptr<EVP_PKEY>;

constexpr long clock_skew_s = 300;  // certificates are valid from 5 minutes ago

caf::error fail(const std::string& what) {
  std::string detail;
  if (auto code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    detail = std::string{" ("} + text + ")";
  }
  ERR_clear_error();
  return make_error(errc::io_failure, what + detail);
}

// Makes `dir` and its parents unless it is a directory already; a new `dir` gets mode 0700.
caf::error make_dir(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return {};
  if (!std::filesystem::create_directories(dir, ec) || ::chmod(dir.c_str(), 0700) != 0)
    return make_error(errc::io_failure, fmt::format("cannot make directory {}: {}", dir,
                                                    ec ? ec.message() : std::strerror(errno)));
  return {};
}

// Writes a PEM file that must not exist yet, with `mode`.
template <class Write>
caf::error write_new(const std::string& path, mode_t mode, Write write) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return make_error(errc::io_failure,
                      fmt::format("cannot write {}: {}{}", path, std::strerror(errno),
                                  errno == EEXIST ? " (nothing is overwritten)" : ""));
  ::fchmod(fd, mode);  // whatever the umask
  std::FILE* f = ::fdopen(fd, "w");
  const bool ok = f && write(f) == 1;
  if (f) std::fclose(f);
  if (!ok) return ::unlink(path.c_str()), fail("cannot write " + path);
  return {};
}

key_ptr new_key() {
  return key_ptr{EVP_EC_gen("P-256")};
}

// A random positive 127-bit serial number.
bool set_serial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return false;
  bytes[0] &= 0x7f;
  openssl_ptr<BIGNUM> bn{BN_bin2bn(bytes, sizeof bytes, nullptr)};
  return bn && BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) != nullptr;
}

bool add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A version-3 certificate for `key` named O=troupe, OU=`unit`, CN=`name`, valid `days`.
x509_ptr new_certificate(EVP_PKEY* key, const std::string& unit, const std::string& name,
                         int days) {
  x509_ptr cert{X509_new()};
  if (!cert || X509_set_version(cert.get(), 2) != 1 || !set_serial(cert.get())) return nullptr;
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -clock_skew_s);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), long{days} * 86400);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  auto add = [&](const char* field, const std::string& v) {
    return X509_NAME_add_entry_by_txt(subject, field, MBSTRING_UTF8,
                                      reinterpret_cast<const unsigned char*>(v.c_str()), -1, -1,
                                      0) == 1;
  };
  if (!add("O", "troupe") || !add("OU", unit) || !add("CN", name)) return nullptr;
  if (X509_set_pubkey(cert.get(), key) != 1) return nullptr;
  return cert;
}

bool dns_name(const std::string& s) {
  return !s.empty() && s.find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789-.") == std::string::npos;
}

// subjectAltName: the name itself when it is a DNS name, then every host.
std::string alt_names(const issue_request& r) {
  std::string out;
  auto add = [&](const std::string& entry) { out += (out.empty() ? "" : ",") + entry; };
  if (dns_name(r.name)) add("DNS:" + r.name);
  for (const auto& h : r.hosts) {
    in_addr ip{};
    add((::inet_pton(AF_INET, h.c_str(), &ip) == 1 ? "IP:" : "DNS:") + h);
  }
  return out;
}

caf::error check_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name.find_first_of("/\n\r") != std::string::npos)
    return make_error(errc::bad_configuration,
                      "a name is 1 to 64 characters, without '/' or line breaks");
  return {};
}

}  // namespace

caf::error make_ca(const std::string& ca_dir, const std::string& name, int days) {
  if (auto err = check_name(name)) return err;
  if (auto err = make_dir(ca_dir)) return err;
  key_ptr key = new_key();
  if (!key) return fail("cannot make a P-256 key");
  x509_ptr cert = new_certificate(key.get(), "ca", name, days);
  if (!cert || X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1 ||
      !add_extension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !add_extension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !add_extension(cert.get(), cert.get(), NID_subject_key_identifier, "hash") ||
      X509_sign(cert.get(), key.get(), EVP_sha256()) == 0)
    return fail("cannot make the CA certificate");
  if (auto err = write_new(ca_dir + "/ca.key", 0600, [&](std::FILE* f) {
        return PEM_write_PrivateKey(f, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
      }))
    return err;
  return write_new(ca_dir + "/ca.pem", 0644,
                   [&](std::FILE* f) { return PEM_write_X509(f, cert.get()); });
}

caf::error issue(const std::string& ca_dir, const std::string& out_dir, const issue_request& r) {
  if (auto err = check_name(r.name)) return err;
  if (r.days <= 0) return make_error(errc::bad_configuration, "--days must be positive");
  x509_ptr ca = read_pem<X509>(ca_dir + "/ca.pem", PEM_read_X509);
  key_ptr ca_key = read_pem<EVP_PKEY>(ca_dir + "/ca.key", PEM_read_PrivateKey);
  if (!ca || !ca_key || X509_check_private_key(ca.get(), ca_key.get()) != 1)
    return fail(fmt::format("{} holds no CA (ca.pem and its ca.key): run troupe-certs init {}",
                            ca_dir, ca_dir));
  key_ptr key = new_key();
  if (!key) return fail("cannot make a P-256 key");
  x509_ptr cert = new_certificate(key.get(), r.is_operator ? "operator" : "node", r.name, r.days);
  const std::string alt = alt_names(r);
  if (!cert || X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get())) != 1 ||
      !add_extension(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !add_extension(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature") ||
      !add_extension(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth,clientAuth") ||
      !add_extension(cert.get(), ca.get(), NID_subject_key_identifier, "hash") ||
      !add_extension(cert.get(), ca.get(), NID_authority_key_identifier, "keyid") ||
      (!alt.empty() && !add_extension(cert.get(), ca.get(), NID_subject_alt_name, alt)) ||
      X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0)
    return fail("cannot make the certificate for " + r.name);
  if (auto err = make_dir(out_dir)) return err;
  if (auto err = write_new(out_dir + "/node.key", 0600, [&](std::FILE* f) {
        return PEM_write_PrivateKey(f, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
      }))
    return err;
  if (auto err = write_new(out_dir + "/node.pem", 0644,
                           [&](std::FILE* f) { return PEM_write_X509(f, cert.get()); }))
    return err;
  return write_new(out_dir + "/ca.pem", 0644,
                   [&](std::FILE* f) { return PEM_write_X509(f, ca.get()); });
}

}  // namespace troupe::certs
