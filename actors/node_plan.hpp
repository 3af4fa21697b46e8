// What a node actor needs to run one graph node: built once per executable.
#pragma once
#include <caf/all.hpp>
#include <memory>
#include <mutex>
#include <vector>

#include "core/graph.hpp"

namespace actorflow {

/// Where an output goes: an actor and the input slot it fills there.
struct consumer {
  caf::actor target;
  int32_t slot = 0;
  /// A chain link: this is the producer's only consumer and this edge its
  /// only input, so the producer's worker runs it next (see deliver in
  /// node_actor.cpp); other edges go through the scheduler.
  bool same_worker = false;
};

enum class node_kind : uint8_t {
  kernel,           // runs its op's kernel
  placeholder,      // forwards the feed the coordinator sends
  variable_read,    // asks its variable actor for the current value
  variable_update,  // asks its resource actor (a variable's, a queue's) to apply the op
  send,             // forwards its input to the recv actor of its cut edge (another partition)
};

/// Where a send delivers: the recv actor of its edge, usually in another
/// process. Set once the partitions are spawned (executable::connect), before
/// the first step; read under the lock, since the step's thread differs.
class send_route {
 public:
  void set(caf::actor recv) {
    std::lock_guard<std::mutex> lock(mutex_);
    recv_ = std::move(recv);
  }
  caf::actor get() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return recv_;
  }

 private:
  mutable std::mutex mutex_;
  caf::actor recv_;
};

struct node_plan {
  node_kind kind = node_kind::kernel;
  const op_def* def = nullptr;
  std::string name;
  std::string task;  // in a cluster, the task it runs on (named in errors); else empty
  uint64_t executable_id = 0;  // process-wide, for the step keys of its resource requests
  attr_map attrs;
  /// Data inputs in op order; a valid tensor here is a folded constant and
  /// receives no message. For update ops input 0 (the variable) is dropped.
  std::vector<tensor> bound_inputs;
  /// slot -> data input index, for slots that carry data; control and start
  /// slots map to -1. Every node has at least one slot.
  std::vector<int> slot_input;
  /// consumers of each output, then the control consumers (sent an empty value).
  std::vector<std::vector<consumer>> output_consumers;
  std::vector<consumer> control_consumers;
  caf::actor variable;  // the resource actor, for variable_read / variable_update
  caf::actor device;    // where expensive kernels run
  std::shared_ptr<send_route> route;  // for sends

  size_t num_slots() const { return slot_input.size(); }
};

using node_plan_ptr = std::shared_ptr<const node_plan>;

/// Spawns the actor that runs `plan` for every step.
caf::actor spawn_node_actor(caf::actor_system& system, node_plan_ptr plan);

}  // namespace actorflow
