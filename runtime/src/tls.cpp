#include "troupe/tls.hpp"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <memory>

#include "troupe/detail/auth.hpp"
#include "troupe/detail/openssl_ptr.hpp"
#include "troupe/error.hpp"

namespace troupe::tls {

namespace {

using detail::openssl_ptr;
using detail::read_pem;
using x509_ptr = openssl_ptr<X509>;
using key_ptr = openssl_ptr<EVP_PKEY>;

caf::error bad(const std::string& what) {
  ERR_clear_error();
  return make_error(errc::bad_configuration, "--tls-dir: " + what);
}

x509_ptr certificate_from_text(const std::string& pem) {
  openssl_ptr<BIO> bio{BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))};
  if (!bio) return nullptr;
  return x509_ptr{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)};
}

// The text of the first `nid` entry of the certificate's subject ("" when there is none).
std::string subject_entry(X509* cert, int nid) {
  char text[256] = {0};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), nid, text, sizeof text) < 0) return {};
  return text;
}

int64_t not_after(X509* cert) {
  tm when{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &when) != 1) return 0;
  return static_cast<int64_t>(timegm(&when));
}

// Verifies `cert` against the CA certificate at `ca_path` now: "" when it verifies, otherwise
// OpenSSL's reason.
std::string verify_against(const std::string& ca_path, X509* cert) {
  openssl_ptr<X509_STORE> store{X509_STORE_new()};
  if (!store || X509_STORE_load_file(store.get(), ca_path.c_str()) != 1)
    return "cannot load the CA certificate " + ca_path;
  openssl_ptr<X509_STORE_CTX> ctx{X509_STORE_CTX_new()};
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), cert, nullptr) != 1)
    return "out of memory";
  if (X509_verify_cert(ctx.get()) == 1) return {};
  return X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
}

identity identity_of(X509* cert) {
  return {subject_entry(cert, NID_commonName),
          subject_entry(cert, NID_organizationalUnitName) == "operator", not_after(cert)};
}

}  // namespace

paths files_in(const std::string& dir) {
  return {dir + "/ca.pem", dir + "/node.pem", dir + "/node.key"};
}

caf::expected<identity> check_dir(const std::string& dir) {
  const paths p = files_in(dir);
  struct stat st {};
  for (const auto* file : {&p.ca, &p.cert, &p.key})
    if (::stat(file->c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      return bad(
          fmt::format("{} is missing (troupe-certs issue writes ca.pem, node.pem and "
                      "node.key)",
                      *file));
  ::stat(p.key.c_str(), &st);
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return bad(fmt::format("{} may be read by other users: chmod 600 it", p.key));
  x509_ptr ca = read_pem<X509>(p.ca, PEM_read_X509);
  if (!ca) return bad(p.ca + " holds no PEM certificate");
  if (X509_check_ca(ca.get()) == 0) return bad(p.ca + " is not a CA certificate");
  x509_ptr cert = read_pem<X509>(p.cert, PEM_read_X509);
  if (!cert) return bad(p.cert + " holds no PEM certificate");
  key_ptr key = read_pem<EVP_PKEY>(p.key, PEM_read_PrivateKey);
  if (!key) return bad(p.key + " holds no unencrypted PEM private key");
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return bad(fmt::format("{} is not the key of {}", p.key, p.cert));
  if (auto why = verify_against(p.ca, cert.get()); !why.empty())
    return bad(fmt::format("{} does not verify against {}: {}", p.cert, p.ca, why));
  return identity_of(cert.get());
}

caf::expected<identity> check_peer(const std::string& dir, const std::string& certificate_pem) {
  x509_ptr cert = certificate_from_text(certificate_pem);
  ERR_clear_error();
  if (!cert) return make_error(errc::authentication_failed, "not a PEM certificate");
  if (auto why = verify_against(files_in(dir).ca, cert.get()); !why.empty())
    return make_error(errc::authentication_failed,
                      "the certificate does not verify against our CA: " + why);
  return identity_of(cert.get());
}

bytes action_text(const bytes& nonce, const std::vector<std::string>& action) {
  std::vector<std::string_view> fields{"troupe-operator-v1", auth::view(nonce)};
  for (const auto& a : action) fields.push_back(a);
  return auth::length_prefixed(fields);
}

caf::expected<bytes> sign(const std::string& dir, const bytes& text) {
  key_ptr key = read_pem<EVP_PKEY>(files_in(dir).key, PEM_read_PrivateKey);
  if (!key) return bad("cannot read " + files_in(dir).key);
  openssl_ptr<EVP_MD_CTX> ctx{EVP_MD_CTX_new()};
  const bool ed = EVP_PKEY_id(key.get()) == EVP_PKEY_ED25519;
  size_t length = 0;
  if (!ctx ||
      EVP_DigestSignInit(ctx.get(), nullptr, ed ? nullptr : EVP_sha256(), nullptr, key.get()) !=
          1 ||
      EVP_DigestSign(ctx.get(), nullptr, &length, text.data(), text.size()) != 1)
    return bad("cannot sign with " + files_in(dir).key);
  bytes signature(length);
  if (EVP_DigestSign(ctx.get(), signature.data(), &length, text.data(), text.size()) != 1)
    return bad("cannot sign with " + files_in(dir).key);
  signature.resize(length);
  return signature;
}

bool verify(const std::string& certificate_pem, const bytes& text, const bytes& signature) {
  x509_ptr cert = certificate_from_text(certificate_pem);
  if (!cert) return ERR_clear_error(), false;
  key_ptr key{X509_get_pubkey(cert.get())};
  openssl_ptr<EVP_MD_CTX> ctx{EVP_MD_CTX_new()};
  if (!key || !ctx) return ERR_clear_error(), false;
  const bool ed = EVP_PKEY_id(key.get()) == EVP_PKEY_ED25519;
  const bool ok = EVP_DigestVerifyInit(ctx.get(), nullptr, ed ? nullptr : EVP_sha256(), nullptr,
                                       key.get()) == 1 &&
                  EVP_DigestVerify(ctx.get(), signature.data(), signature.size(), text.data(),
                                   text.size()) == 1;
  ERR_clear_error();
  return ok;
}

caf::expected<std::string> read_certificate(const std::string& dir) {
  const std::string path = files_in(dir).cert;
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return bad("cannot read " + path);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0 && text.size() < (1u << 16);)
    text.append(buffer, n);
  std::fclose(f);
  return text;
}

}  // namespace troupe::tls
