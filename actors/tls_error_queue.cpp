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
// Since they see every call that drives a handshake, they also note why one
// failed (CAF reports only that the connection went away): the connecting
// side gets the reason in its error, the accepting side logs it
// (actors/guarded_connection.hpp).
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <string>

#include "actors/guarded_connection.hpp"

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

extern "C" int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto next = libssl_function<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  int result = next(ssl, buf, num);
  note_handshake_failure(ssl, result);
  return result;
}

extern "C" int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto next = libssl_function<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  int result = next(ssl, buf, num);
  note_handshake_failure(ssl, result);
  return result;
}

extern "C" int SSL_connect(SSL* ssl) {
  static const auto next = libssl_function<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  int result = next(ssl);
  note_handshake_failure(ssl, result);
  return result;
}

extern "C" int SSL_accept(SSL* ssl) {
  static const auto next = libssl_function<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  int result = next(ssl);
  note_handshake_failure(ssl, result);
  return result;
}
