// OpenSSL reports why an SSL_read or SSL_write did not finish (SSL_get_error)
// by first looking at the calling thread's error queue, so the queue must be
// empty before every such call (SSL_get_error(3)). CAF 0.17's OpenSSL
// session never empties it. All TLS connections of a process share CAF's
// one network thread, so an error one connection left behind (a peer killed
// mid-stream: OpenSSL 3 queues "unexpected eof"; garbage on the port) made
// the next "try again later" on any other connection read as a failure, and
// CAF closed that healthy connection too: a worker exiting dropped the other
// workers' links to their ps tasks.
//
// These definitions interpose on libssl's (libactorflow comes before libssl
// in the process's symbol lookup order), empty the queue, and call libssl's.
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace {

template <class F>
F libssl_function(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto next = libssl_function<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return next(ssl, buf, num);
}

extern "C" int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto next = libssl_function<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return next(ssl, buf, num);
}
