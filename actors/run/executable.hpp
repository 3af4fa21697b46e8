// An executable is one compiled run signature: the graph pruned to what the
// fetches and targets need, one actor per node, and a step coordinator that
// starts steps and collects their results. Sessions cache them by signature.
#pragma once
#include <caf/all.hpp>
#include <functional>
#include <future>
#include <map>
#include <vector>

#include "actors/compile/placement.hpp"
#include "actors/compile/signature.hpp"
#include "actors/run/messages.hpp"
#include "actors/run/runtime.hpp"
#include "core/device_name.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// The actor serving a resource node and, for a variable in an
/// accelerator's memory, that variable (its nodes there launch on it).
struct resource_ref {
  caf::actor actor;
  device_variable_ptr on_device;
};
/// Finds (or spawns) what serves resource node `n` (a variable, a queue); a
/// variable lives on `device` (see resource_table::actor_for).
using variable_lookup = std::function<resource_ref(const node& n, const local_device& device)>;

/// What a session runs steps on: one process's executable, or a
/// distributed one whose partitions live in several processes.
class runnable {
 public:
  virtual ~runnable() = default;
  /// Starts one step; the request's promise receives the fetched tensors.
  virtual void start(step_request_ptr request) const = 0;
  /// True once a task it runs on went down; the session then compiles the
  /// signature again, reconnecting to `dead_tasks()`.
  virtual bool broken() const { return false; }
  virtual std::vector<std::string> dead_tasks() const { return {}; }
  /// Where the nodes it runs in this process were placed, and why.
  virtual const std::vector<placement_entry>& placement_log() const = 0;
};

class send_route;

class executable : public runnable {
 public:
  /// Prunes, validates and spawns; throws actorflow::error on a bad signature.
  /// `task` names the cluster task it runs on in its nodes' errors (empty: none).
  executable(const graph& g, const run_signature& sig, runtime& rt, const variable_lookup& vars,
             const std::string& task = "");
  ~executable();
  executable(const executable&) = delete;
  executable& operator=(const executable&) = delete;

  /// Starts one step; the request's promise receives the fetched tensors.
  void start(step_request_ptr request) const override;
  size_t num_actors() const { return actors_.size(); }
  /// Where each node with an actor runs, and why.
  const std::vector<placement_entry>& placement_log() const override { return placement_log_; }

  // A partition of a distributed graph (actors/compile/partition.hpp) is driven by
  // messages to its coordinator (start_atom, abort_atom); its recv actors are
  // where the sends of other partitions deliver, and its sends are connected
  // to those before the first step.
  caf::actor coordinator() const { return coordinator_; }
  const std::map<std::string, caf::actor>& recvs() const { return recvs_; }
  /// Points send node `send_name` at the recv actor of its edge; throws for an unknown send.
  void connect(const std::string& send_name, caf::actor recv) const;

 private:
  std::vector<caf::actor> actors_;
  caf::actor coordinator_;
  std::map<std::string, caf::actor> recvs_;
  std::map<std::string, std::shared_ptr<send_route>> routes_;
  std::vector<placement_entry> placement_log_;
};

}  // namespace actorflow
