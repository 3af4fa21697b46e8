// Every plain TCP connection of a runtime, between the socket and CAF's BASP
// broker. CAF 0.17 trusts what arrives: the source node a message claims, and
// the payload length of a header, which it allocates before reading a byte of
// payload. This layer sees every byte first and
//  - with a cluster secret, runs a mutual challenge-response handshake
//    (HMAC-SHA256 over fresh nonces of both sides) before BASP sees a byte:
//    a peer that cannot prove the secret never reaches an actor, so
//    authentication belongs to the connection and a claimed node or actor id
//    proves nothing;
//  - bounds what a peer can make this process allocate: a few bytes before it
//    has authenticated, 64 KiB for BASP's own handshake message, and
//    `max_message_bytes` for every message after it; a connection that
//    exceeds a bound is closed and logged, and the process goes on;
//  - closes a connection whose handshakes do not complete in time.
// TLS connections (CAF's OpenSSL module) do not pass through here: TLS
// authenticates them by certificate before BASP sees a byte.
#pragma once
// clang-format off: the version guard comes before the CAF headers it guards.
#include "actors/caf_ext/caf_version.hpp"
// clang-format on

#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/scribe.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace actorflow {

struct connection_limits {
  /// The cluster secret every peer must prove; empty: no handshake of ours.
  std::string secret;
  /// Time a new connection has to complete both handshakes (ours and BASP's).
  std::chrono::milliseconds handshake_timeout{10000};
  /// The largest message a peer may send once connected.
  uint64_t max_message_bytes = uint64_t{1} << 30;
  /// The largest first message (BASP's handshake, a few hundred bytes).
  static constexpr uint64_t handshake_message_bytes = 64 * 1024;
};

/// Which side of a connection this process is.
enum class connection_role { accepting, connecting };

/// A scribe (CAF's connection object) whose stream runs through the guard.
caf::io::scribe_ptr make_guarded_scribe(caf::io::network::default_multiplexer& mpx,
                                        caf::io::network::native_socket fd, connection_role role,
                                        std::shared_ptr<const connection_limits> limits);

/// Why the newest connection this process made to `port` failed in its
/// handshake, if one did after `since`: remote_actor reports only that the
/// connection went away.
std::optional<std::string> handshake_failure_since(uint16_t port,
                                                   std::chrono::steady_clock::time_point since);

/// Bytes carried by this process's plain TCP connections (after the cluster
/// handshake: BASP's messages, headers included), as the sockets saw them.
struct traffic_bytes {
  uint64_t sent = 0;
  uint64_t received = 0;
};

/// Since the process started, by peer address ("127.0.0.1:7001": for a
/// connection this process made, the port the peer listens on; for one it
/// accepted, the peer's own port). TLS connections bypass the guard and are
/// not counted.
std::map<std::string, traffic_bytes> traffic_by_peer();
/// The same, summed over every peer.
traffic_bytes traffic_total();

/// Reports a connection closed in its handshake: logged (rate-limited) when
/// a peer connected to us, kept for handshake_failure_since when we
/// connected. Also for TLS handshakes (actors/caf_ext/tls_error_queue.cpp).
void report_handshake_failure(int fd, connection_role role, const std::string& reason);

}  // namespace actorflow
