// Definitions of SSL_read, SSL_write, SSL_connect, SSL_accept and SSL_shutdown that the
// executable's own symbols give precedence over libssl's; each guards one call and then calls
// libssl's.
//
// 1. The error queue. caf_openssl 0.17 reads OpenSSL's per-thread error queue after every one
//    of these calls (SSL_get_error) but empties it only when its own logging is on. A
//    handshake that fails (a stranger's certificate, junk) therefore left errors in the
//    multiplexer thread's queue, and the next read on any healthy connection of that thread
//    was taken for a failure: CAF closed it (remote_link_unreachable). OpenSSL's rule is to
//    empty the queue before each call; the wrappers do.
// 2. SIGPIPE. OpenSSL writes to its socket with write(2), without MSG_NOSIGNAL, and any of
//    these calls may write (a record, an alert). A peer that hung up must give the call an
//    error (EPIPE), not kill the process, whatever the process does with SIGPIPE: the wrappers
//    block SIGPIPE in the calling thread for the call and take the one it raised.
//
// Linked into every binary through guard_openssl_calls(), which configure_actor_system and the
// metrics endpoint call.
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>

#include <ctime>

namespace troupe::tls {

void guard_openssl_calls() {}  // referenced so that this file is linked

}  // namespace troupe::tls

namespace {

template <class F>
F next_definition(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

// Blocks SIGPIPE in this thread for its lifetime; on the way out, takes a SIGPIPE raised
// meanwhile (it was unblocked before, so none was pending) and restores the thread's mask.
// Where the thread already blocks SIGPIPE it does nothing.
class sigpipe_held {
 public:
  sigpipe_held() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &before_);
    held_ = !sigismember(&before_, SIGPIPE);
  }
  ~sigpipe_held() {
    if (!held_) return;
    sigset_t pending;
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }
  sigpipe_held(const sigpipe_held&) = delete;
  sigpipe_held& operator=(const sigpipe_held&) = delete;

 private:
  sigset_t pipe_;
  sigset_t before_;
  bool held_ = false;
};

// Empties the error queue, holds SIGPIPE, and makes the call.
template <class Call>
int guarded(Call call) {
  ERR_clear_error();
  sigpipe_held hold;
  return call();
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  return guarded([&] { return real(ssl, buf, num); });
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  return guarded([&] { return real(ssl, buf, num); });
}

int SSL_connect(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_connect");
  return guarded([&] { return real(ssl); });
}

int SSL_accept(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_accept");
  return guarded([&] { return real(ssl); });
}

int SSL_shutdown(SSL* ssl) {  // sends close_notify: a write
  static const auto real = next_definition<int (*)(SSL*)>("SSL_shutdown");
  return guarded([&] { return real(ssl); });
}

}  // extern "C"
