// An executable is one compiled run signature: the graph pruned to what the
// fetches and targets need, one actor per node, and a step coordinator that
// starts steps and collects their results. Sessions cache them by signature.
#pragma once
#include <caf/all.hpp>
#include <functional>
#include <future>
#include <vector>

#include "actors/messages.hpp"
#include "actors/runtime.hpp"
#include "core/graph.hpp"

namespace actorflow {

struct run_signature {
  std::vector<endpoint> feeds;    // placeholders, in the order feed tensors arrive
  std::vector<endpoint> fetches;  // outputs returned, in order
  std::vector<int> targets;       // nodes run for their effect
};

/// Finds (or spawns) the actor of the variable node `name`.
using variable_lookup = std::function<caf::actor(const std::string& name)>;

class executable {
 public:
  /// Prunes, validates and spawns; throws actorflow::error on a bad signature.
  executable(const graph& g, const run_signature& sig, runtime& rt, const variable_lookup& vars);
  ~executable();
  executable(const executable&) = delete;
  executable& operator=(const executable&) = delete;

  /// Starts one step; the request's promise receives the fetched tensors.
  void start(step_request_ptr request) const;
  size_t num_actors() const { return actors_.size(); }

 private:
  std::vector<caf::actor> actors_;
  caf::actor coordinator_;
};

}  // namespace actorflow
