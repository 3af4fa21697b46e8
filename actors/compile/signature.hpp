// A run signature (what one session::run feeds, fetches and runs for its
// effect) and the nodes it needs: what every graph pass and the executable
// share, without the runtime.
#pragma once
#include <vector>

#include "core/graph.hpp"

namespace actorflow {

struct run_signature {
  std::vector<endpoint> feeds;    // placeholders, in the order feed tensors arrive
  std::vector<endpoint> fetches;  // outputs returned, in order
  std::vector<int> targets;       // nodes run for their effect
};

/// The nodes `sig` needs: its fetches and targets and all they depend on.
/// Without `follow_resources`, an op on a resource (an update, a queue op)
/// does not need the resource node: the resource's actor serves it.
std::vector<bool> needed_nodes(const graph& g, const run_signature& sig, bool follow_resources);

}  // namespace actorflow
