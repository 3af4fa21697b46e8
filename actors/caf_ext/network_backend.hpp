// The network backend the runtime gives CAF's middleman: CAF's own epoll
// multiplexer, whose plain TCP connections pass through actorflow's guard
// (actors/caf_ext/guarded_connection.hpp), and which after each event keeps polling
// for a while before it blocks again.
#pragma once
// clang-format off: the version guard comes before the CAF headers it guards.
#include "actors/caf_ext/caf_version.hpp"
// clang-format on

#include <caf/io/network/default_multiplexer.hpp>
#include <memory>

#include "actors/caf_ext/guarded_connection.hpp"

namespace actorflow {

/// CAF's multiplexer blocks in epoll_wait as soon as nothing is ready, so each
/// message of a step that arrives, and each one sent from a scheduler thread
/// (which writes to the multiplexer's wake-up pipe), waits for the network
/// thread to be woken: tens of microseconds each on a busy machine, several
/// times per step. This one keeps polling without blocking for the
/// runtime_config's `idle_spin` after its last event, yielding its core to
/// any other thread that wants it, and only then blocks.
class spinning_multiplexer : public caf::io::network::default_multiplexer {
 public:
  explicit spinning_multiplexer(caf::actor_system* system);
  void run() override;
  /// Connections accepted by a published port, and made by remote_actor:
  /// both run through the guard with the runtime_config's limits.
  caf::io::scribe_ptr new_scribe(caf::io::network::native_socket fd) override;
  caf::expected<caf::io::scribe_ptr> new_tcp_scribe(const std::string& host,
                                                    uint16_t port) override;

 private:
  std::shared_ptr<const connection_limits> limits();
  std::shared_ptr<const connection_limits> limits_;
};

}  // namespace actorflow
