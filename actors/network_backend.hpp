// The network backend the runtime gives CAF's middleman: CAF's own epoll
// multiplexer, which after each event keeps polling for a while before it
// blocks again.
#pragma once
#include <caf/io/network/default_multiplexer.hpp>

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
};

}  // namespace actorflow
