// One device of this process as placement and the executable see it: its
// name, its actor, and its threads or its accelerator. The runtime owns the
// devices (actors/run/runtime.hpp); graph passes read this list only.
#pragma once
#include <oneapi/tbb/task_arena.h>

#include <caf/actor.hpp>
#include <string>

#include "core/export.hpp"
#include "devices/accelerator.hpp"

namespace actorflow {

/// One device of this process, as placement sees it.
struct ACTORFLOW_API local_device {
  std::string name;  // "/cpu:0"
  std::string type;  // "cpu", "stand_in"
  int index = 0;
  /// A CPU device's actor takes device_task (devices/device.hpp), an
  /// accelerator's gpu_task (devices/cuda/gpu_device_actor.hpp).
  caf::actor actor;
  /// A CPU device's threads: its kernels run here, and a loop's actor joins
  /// it to split a large kernel.
  tbb::task_arena* arena = nullptr;
  /// An accelerator (null for CPU devices).
  accelerator* accel = nullptr;
};

}  // namespace actorflow
