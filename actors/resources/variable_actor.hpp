// A variable actor owns one variable's tensor and its optimizer slots. Reads
// and updates are messages, so updates to one variable are serialized without
// locks; a read shares the buffer, and an in-place update after it copies first.
//
// A variable placed on an accelerator keeps its value and slots in that
// device's memory (a device_variable, devices/accelerator.hpp): its nodes
// there read and update it through their launches, and its actor serves
// the checkpoints (snapshot and restore), each as work on the device's
// stream, in order with the launches.
#pragma once
#include <oneapi/tbb/task_arena.h>

#include <caf/all.hpp>

#include "core/tensor.hpp"
#include "devices/accelerator.hpp"

namespace actorflow {

/// Spawns the actor for variable `name`; large updates run inside `arena`.
caf::actor spawn_variable_actor(caf::actor_system& system, std::string name,
                                tbb::task_arena& arena);

/// Where a variable on an accelerator lives: the device, its device actor
/// (which runs the actor's copies in stream order) and the variable itself.
struct variable_on_device {
  accelerator* device = nullptr;
  caf::actor device_actor;
  device_variable_ptr variable;
};

/// Spawns the actor of a variable that lives on `home.device`.
caf::actor spawn_device_variable_actor(caf::actor_system& system, variable_on_device home);

}  // namespace actorflow
