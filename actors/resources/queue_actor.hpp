// A queue actor owns one FIFO queue (ops/queue.hpp). Graph ops reach it as
// update messages from node actors; readers and tools use its direct
// messages (messages.hpp: enqueue, dequeue, close, size). It never blocks a
// scheduler thread: an enqueue on a full queue or a dequeue on an empty one
// gets a response promise that is kept when space or an element arrives.
#pragma once
#include <caf/all.hpp>
#include <string>

#include "ops/queue.hpp"

namespace actorflow {

/// Spawns the actor of queue `name`. Every request is answered with an
/// update_result: the dequeued components, or an error naming the queue.
/// On exit, requests still waiting fail with "queue '...' was shut down".
caf::actor spawn_queue_actor(caf::actor_system& system, std::string name, queue_spec spec);

}  // namespace actorflow
