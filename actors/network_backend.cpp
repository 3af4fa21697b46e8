#include "actors/network_backend.hpp"

#include <sched.h>

#include <chrono>

#include "actors/runtime_config.hpp"

namespace actorflow {

spinning_multiplexer::spinning_multiplexer(caf::actor_system* system)
    : caf::io::network::default_multiplexer(system) {}

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

}  // namespace actorflow
