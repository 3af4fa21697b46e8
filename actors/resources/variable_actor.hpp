// A variable actor owns one variable's tensor and its optimizer slots. Reads
// and updates are messages, so updates to one variable are serialized without
// locks; a read shares the buffer, and an in-place update after it copies first.
#pragma once
#include <oneapi/tbb/task_arena.h>

#include <caf/all.hpp>

#include "core/tensor.hpp"

namespace actorflow {

/// Spawns the actor for variable `name`; large updates run inside `arena`.
caf::actor spawn_variable_actor(caf::actor_system& system, std::string name,
                                tbb::task_arena& arena);

}  // namespace actorflow
