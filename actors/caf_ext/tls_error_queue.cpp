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
// That order is a property of the link, not of this code: the runtime checks
// it before it turns TLS on (require_ssl_interposer).
// Since they see every call that drives a handshake, they also note why one
// failed (CAF reports only that the connection went away): the connecting
// side gets the reason in its error, the accepting side logs it
// (actors/caf_ext/guarded_connection.hpp).
#include "actors/caf_ext/tls_error_queue.hpp"

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <string>

#include "actors/caf_ext/guarded_connection.hpp"
#include "core/error.hpp"

namespace {

template <class F>
F libssl_function(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

std::string tls_failure_reason(SSL* ssl, int error) {
  if (error == SSL_ERROR_SSL) {
    const char* reason = ERR_reason_error_string(ERR_peek_error());
    std::string text = reason ? reason : "unknown error";
    if (text.find("certificate") != std::string::npos ||
        text.find("unknown ca") != std::string::npos)
      return "the TLS handshake failed (" + text + "): the peer's certificate is not signed by " +
             "the CA this process trusts (--tls-ca), or ours by the peer's";
    if (text.find("wrong version") != std::string::npos || text.find("record") != std::string::npos)
      return "the TLS handshake failed (" + text + "): the peer does not speak TLS";
    return "the TLS handshake failed: " + text;
  }
  return SSL_is_server(ssl) != 0
             ? "the peer left during the TLS handshake (it may not speak TLS)"
             : "the peer closed the TLS handshake: it refused our certificate, or it does not "
               "speak TLS";
}

// After a call that returned `result`: a fatal error before the handshake
// finished is reported, once per connection.
void note_handshake_failure(SSL* ssl, int result) {
  if (result > 0 || SSL_is_init_finished(ssl)) return;
  int error = SSL_get_error(ssl, result);
  if (error != SSL_ERROR_SSL && error != SSL_ERROR_SYSCALL && error != SSL_ERROR_ZERO_RETURN)
    return;
  static int noted_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  if (SSL_get_ex_data(ssl, noted_index) != nullptr) return;
  SSL_set_ex_data(ssl, noted_index, ssl);
  auto role = SSL_is_server(ssl) != 0 ? actorflow::connection_role::accepting
                                      : actorflow::connection_role::connecting;
  actorflow::report_handshake_failure(SSL_get_fd(ssl), role, tls_failure_reason(ssl, error));
}

}  // namespace

// SSL_read and SSL_write are aliases of these hidden definitions: taking the
// address of an exported name inside a shared library yields whatever the
// dynamic linker resolved it to (here, possibly libssl's), the address of a
// hidden one is always ours, so ssl_interposer_active can tell them apart.
extern "C" {

[[gnu::visibility("hidden")]] int actorflow_ssl_read(SSL* ssl, void* buf, int num) {
  static const auto next = libssl_function<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  int result = next(ssl, buf, num);
  note_handshake_failure(ssl, result);
  return result;
}

[[gnu::visibility("hidden")]] int actorflow_ssl_write(SSL* ssl, const void* buf, int num) {
  static const auto next = libssl_function<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  int result = next(ssl, buf, num);
  note_handshake_failure(ssl, result);
  return result;
}

// Default visibility, explicitly: the library is compiled with hidden
// visibility, and a hidden SSL_read would interpose nothing.
[[gnu::visibility("default")]] int SSL_read(SSL* ssl, void* buf, int num)
    __attribute__((alias("actorflow_ssl_read")));
[[gnu::visibility("default")]] int SSL_write(SSL* ssl, const void* buf, int num)
    __attribute__((alias("actorflow_ssl_write")));

}  // extern "C"

extern "C" [[gnu::visibility("default")]] int SSL_connect(SSL* ssl) {
  static const auto next = libssl_function<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  int result = next(ssl);
  note_handshake_failure(ssl, result);
  return result;
}

extern "C" [[gnu::visibility("default")]] int SSL_accept(SSL* ssl) {
  static const auto next = libssl_function<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  int result = next(ssl);
  note_handshake_failure(ssl, result);
  return result;
}

namespace actorflow {

namespace {

bool resolves_to(const char* name, void* ours) { return dlsym(RTLD_DEFAULT, name) == ours; }

}  // namespace

bool ssl_interposer_active() {
  return resolves_to("SSL_read", reinterpret_cast<void*>(&actorflow_ssl_read)) &&
         resolves_to("SSL_write", reinterpret_cast<void*>(&actorflow_ssl_write));
}

void require_ssl_interposer() {
  if (ssl_interposer_active()) return;
  fail("tls",
       "SSL_read/SSL_write resolve to libssl's, not libactorflow's: the SSL error-queue fix "
       "(actors/caf_ext/tls_error_queue.cpp) was dropped by a static or reordered link, and "
       "one failed TLS connection would close healthy ones. Link libactorflow as a shared "
       "library ahead of libssl (link actorflow::actorflow, not libssl directly before it), "
       "or see actors/caf_ext/README.md");
}

}  // namespace actorflow
