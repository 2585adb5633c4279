// caf_openssl 0.17 reads OpenSSL's per-thread error queue after every SSL_read, SSL_write,
// SSL_connect and SSL_accept (SSL_get_error) but empties it only when its own logging is on.
// A handshake that fails (a stranger's certificate, junk) therefore leaves errors in the
// multiplexer thread's queue, and the next read on any healthy connection of that thread is
// taken for a failure: CAF closes it (remote_link_unreachable). OpenSSL's rule is to empty the
// queue before each of those calls; these definitions, which the executable's own symbols give
// precedence over libssl's, do that and then call libssl. Linked into every binary through
// keep_tls_error_queues_clean(), which configure_actor_system calls.
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace troupe::tls {

void keep_tls_error_queues_clean() {}  // referenced so that this file is linked

}  // namespace troupe::tls

namespace {

template <class F>
F next_definition(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_connect(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

int SSL_accept(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

}  // extern "C"
