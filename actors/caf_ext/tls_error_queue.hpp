// actorflow's SSL_read, SSL_write, SSL_connect and SSL_accept, which empty
// OpenSSL's error queue before calling libssl's (tls_error_queue.cpp). They
// work only while the dynamic linker resolves those names to libactorflow's
// definitions before libssl's; a static link of libactorflow, or a link
// order that puts libssl first, drops them silently.
#pragma once
// clang-format off: the version guard comes before the CAF headers it guards.
#include "actors/caf_ext/caf_version.hpp"
// clang-format on

namespace actorflow {

/// Whether the process resolves SSL_read and SSL_write to actorflow's
/// definitions (dlsym(RTLD_DEFAULT, ...) against their addresses).
bool ssl_interposer_active();

/// Throws actorflow::error ("[tls] ...") unless ssl_interposer_active():
/// the runtime calls it before it turns TLS on.
void require_ssl_interposer();

}  // namespace actorflow
