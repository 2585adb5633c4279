// Owning pointers to OpenSSL objects (each freed by its own *_free) and a reader of the first
// PEM object in a file. For the runtime's TLS code (tls.cpp) and troupe-certs; header-only.
#pragma once

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cstdio>
#include <memory>
#include <string>

namespace troupe::detail {

inline void openssl_free(X509* x) {
  X509_free(x);
}
inline void openssl_free(EVP_PKEY* k) {
  EVP_PKEY_free(k);
}
inline void openssl_free(X509_STORE* s) {
  X509_STORE_free(s);
}
inline void openssl_free(X509_STORE_CTX* c) {
  X509_STORE_CTX_free(c);
}
inline void openssl_free(BIO* b) {
  BIO_free(b);
}
inline void openssl_free(EVP_MD_CTX* c) {
  EVP_MD_CTX_free(c);
}
inline void openssl_free(BIGNUM* n) {
  BN_free(n);
}

struct openssl_deleter {
  template <class T>
  void operator()(T* p) const {
    openssl_free(p);
  }
};

template <class T>
using openssl_ptr = std::unique_ptr<T, openssl_deleter>;

// The first PEM object of `path`, read by `reader` (PEM_read_X509, PEM_read_PrivateKey); null
// when the file cannot be opened or does not hold one.
template <class T, class Reader>
openssl_ptr<T> read_pem(const std::string& path, Reader reader) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return nullptr;
  openssl_ptr<T> x{reader(f, nullptr, nullptr, nullptr)};
  std::fclose(f);
  return x;
}

}  // namespace troupe::detail
