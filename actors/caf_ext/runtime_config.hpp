// The CAF config a runtime builds its actor system from.
#pragma once
#include <atomic>
#include <caf/actor_system_config.hpp>
#include <chrono>
#include <cstdint>
#include <memory>

#include "actors/caf_ext/guarded_connection.hpp"

namespace actorflow {

/// CAF's config, plus how long the runtime's idle threads keep polling
/// before they block: the network thread after its last event
/// (actors/caf_ext/network_backend.hpp), scheduler threads once out of work
/// (actors/caf_ext/scheduler.cpp). 0: they block at once, as CAF's do. How long
/// scheduler threads keep polling while kernels run on the CPU device's
/// pool (counted by kernels_in_flight). And what the guard of every plain
/// connection enforces (actors/caf_ext/guarded_connection.hpp).
struct runtime_config : caf::actor_system_config {
  std::chrono::microseconds idle_spin{0};
  std::chrono::microseconds kernel_wait_spin{0};
  std::shared_ptr<std::atomic<int64_t>> kernels_in_flight =
      std::make_shared<std::atomic<int64_t>>(0);
  connection_limits connections;
};

}  // namespace actorflow
