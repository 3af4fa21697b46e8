#include "actors/caf_ext/network_backend.hpp"

#include <sched.h>

#include <chrono>

#include "actors/caf_ext/runtime_config.hpp"

namespace actorflow {

spinning_multiplexer::spinning_multiplexer(caf::actor_system* system)
    : caf::io::network::default_multiplexer(system) {
  auto* config = dynamic_cast<const runtime_config*>(&system->config());
  limits_ = std::make_shared<const connection_limits>(config != nullptr ? config->connections
                                                                        : connection_limits{});
}

// CAF's run() is `while (num_socket_handlers() > 0) poll_once(true);`.
void spinning_multiplexer::run() {
  using clock = std::chrono::steady_clock;
  auto* config = dynamic_cast<const runtime_config*>(&system().config());
  const auto window = config != nullptr ? config->idle_spin : std::chrono::microseconds(0);
  auto last_event = clock::now();
  while (num_socket_handlers() > 0) {
    if (window.count() == 0 || clock::now() - last_event > window) {
      poll_once(true);
      last_event = clock::now();
    } else if (poll_once(false)) {
      last_event = clock::now();
    } else {
      sched_yield();
    }
  }
}

std::shared_ptr<const connection_limits> spinning_multiplexer::limits() { return limits_; }

// Acceptors call this on the multiplexer's thread, the middleman's connect
// (new_tcp_scribe) on its own: limits_ is set once, in the constructor.
caf::io::scribe_ptr spinning_multiplexer::new_scribe(caf::io::network::native_socket fd) {
  return make_guarded_scribe(*this, fd, connection_role::accepting, limits());
}

caf::expected<caf::io::scribe_ptr> spinning_multiplexer::new_tcp_scribe(const std::string& host,
                                                                        uint16_t port) {
  auto fd = caf::io::network::new_tcp_connection(host, port);
  if (!fd) return std::move(fd.error());
  return make_guarded_scribe(*this, *fd, connection_role::connecting, limits());
}

}  // namespace actorflow
