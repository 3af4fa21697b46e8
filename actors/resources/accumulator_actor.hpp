// An accumulator actor owns one conditional accumulator (ops/accumulator.hpp):
// the sum of the gradients applied since the last take, their count, and the
// global step. Graph ops reach it as update messages from node actors, so they
// are serialized without locks. A take that needs more gradients than have
// arrived gets a response promise, kept when enough arrive: no scheduler
// thread ever blocks.
#pragma once
#include <caf/all.hpp>
#include <string>

#include "ops/accumulator.hpp"

namespace actorflow {

/// Spawns the actor of accumulator `name`, holding gradients of `spec` (or,
/// when `sparse`, rows of gradients of a variable of `spec`). Every
/// request is answered with an update_result: the average for a take, the
/// count for num_accumulated, or an error naming the accumulator. When its
/// session closes its resources (close_atom) or the actor exits, takes still
/// waiting fail with "accumulator '...' was shut down".
caf::actor spawn_accumulator_actor(caf::actor_system& system, std::string name, tensor_spec spec,
                                   bool sparse = false);

}  // namespace actorflow
