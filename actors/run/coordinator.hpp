// The step coordinator of an executable: it starts each step (the feeds
// to the placeholders, an empty start value to the nodes without inputs),
// collects the fetched values and the targets' reports, and answers the
// caller; a partition's coordinator is driven by a cluster client's
// start_atom and abort_atom instead (actors/cluster/).
#pragma once
#include <caf/all.hpp>
#include <memory>
#include <string>
#include <vector>

#include "actors/run/loop_history.hpp"
#include "actors/run/messages.hpp"

namespace actorflow {

/// A placeholder and the feed it takes.
struct feed_route {
  caf::actor target;
  size_t feed_index;
};

/// What a coordinator knows of its executable: made while compiling, read
/// only once the first step starts.
struct coordinator_plan {
  std::vector<feed_route> placeholders;  // get their feed in slot 0
  std::vector<caf::actor> starters;      // nodes without inputs get an empty start value
  size_t num_feeds = 0;
  size_t num_fetches = 0;
  std::vector<std::string> fetch_names;  // "node:index", for errors
  size_t num_targets = 0;
  uint64_t executable_id = 0;
  /// The resource actors that may hold a request of a step (op_def::may_wait):
  /// told to cancel them when the step fails or is aborted.
  std::vector<caf::actor> waiting_resources;
  /// With loops, a failed step ends at its first error and its node actors
  /// drop it (drop_atom): a loop would not otherwise stop to let the errors
  /// reach every sink.
  bool has_loops = false;
  std::vector<caf::actor> nodes;
  /// The stores of saved forward values (loop gradients): a step's are
  /// freed when it ends.
  std::vector<std::shared_ptr<loop_history>> histories;
};

/// Spawns the coordinator of `plan`.
caf::actor spawn_coordinator(caf::actor_system& system, std::shared_ptr<coordinator_plan> plan);

}  // namespace actorflow
