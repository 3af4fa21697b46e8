// The CPU device: an actor in front of a TBB task_arena. Node actors hand it
// expensive kernels; the arena's threads run them and send the results on,
// so no CAF scheduler thread blocks on a long kernel.
#pragma once
#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <caf/all.hpp>
#include <memory>

#include "core/export.hpp"

namespace actorflow {

struct ACTORFLOW_API cpu_device {
  caf::actor actor;
  /// Tasks handed to the arena and not yet finished; shutdown waits for zero,
  /// since a finishing task still sends messages and drops actor handles.
  std::shared_ptr<std::atomic<int64_t>> in_flight;
};

/// Spawns the device actor for `arena`, which must outlive it; `in_flight`
/// (a new counter when null) counts its tasks.
ACTORFLOW_API cpu_device
spawn_cpu_device(caf::actor_system& system, tbb::task_arena& arena,
                 std::shared_ptr<std::atomic<int64_t>> in_flight = nullptr);

}  // namespace actorflow
