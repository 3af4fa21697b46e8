// Which worker runs a consumer that a value makes runnable (placement in
// node_plan.hpp): chains of nodes, a cond's branches and a loop's body stay
// on the worker that runs their producer, so that a value between them costs
// no thread wake-up; a long chain is cut into segments, one per worker.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/run/node_plan.hpp"

namespace actorflow {

// An edge the runtime carries: output (node, index) of a source to a slot of a consumer.
struct plan_edge {
  endpoint from;
  int to_node;  // -1: the coordinator
  int32_t slot;
  bool control;
};

/// How each edge (sorted by producer) places its consumer. A chain of many
/// links is cut into segments, one per worker, so that its steps in flight
/// keep all the workers busy; its nodes get a batch limit.
std::vector<placement> place_chains(const std::vector<plan_edge>& edges,
                                    const std::vector<std::shared_ptr<node_plan>>& plans,
                                    size_t coordinator_slots, size_t workers);

}  // namespace actorflow
