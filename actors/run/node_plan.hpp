// What a node actor needs to run one graph node: built once per executable.
#pragma once
#include <oneapi/tbb/task_arena.h>

#include <caf/all.hpp>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/run/loop_gate.hpp"
#include "actors/run/loop_history.hpp"
#include "core/graph.hpp"
#include "devices/accelerator.hpp"

namespace actorflow {

/// Which worker runs a consumer that a message makes runnable (see deliver
/// in node_output.cpp and place_chains in chains.cpp).
enum class placement : uint8_t {
  scheduler,     // CAF's scheduler picks one, waking it if asleep
  same_worker,   // a chain link: the producer's worker runs it next
  pinned,        // a link in a segment of a long chain: the same, and never stolen
  next_segment,  // a link between segments: pinned to the next worker when
                 // steps queue behind this one, else as `pinned`
  after_queued,  // into a node of several inputs: the producer's worker runs it
                 // after the jobs it has queued, waking no other
};

/// Where an output goes: an actor, the input slot it fills there, and which
/// of the actor's nodes it is for (an actor may run several: see
/// spawn_node_host).
struct consumer {
  caf::actor target;
  int32_t slot = 0;
  placement place = placement::scheduler;
  uint32_t member = 0;
  /// The consumer runs on the producer's accelerator: it gets the value in
  /// device memory.
  bool on_device = false;
};

enum class node_kind : uint8_t {
  kernel,           // runs its op's kernel
  placeholder,      // forwards the feed the coordinator sends
  recv,             // forwards what the send of its cut edge delivers (another partition)
  variable_read,    // asks its variable actor for the current value
  variable_update,  // asks its resource actor (a variable's, a queue's) to apply the op
  send,             // forwards its input to the recv actor of its cut edge (another partition)
  switch_value,     // control flow: its data to the output its predicate picks, dead to the other
  merge_values,     // control flow: the first live input, and which one it was
  enter_frame,      // a loop: its input, in the child frame (iteration 0)
  exit_frame,       // a loop: its live input, in the parent frame; drops the others
  loop_merge,       // a loop: each input as it comes (from its enter, then one iteration on
                    // from the body: it serves its next_iteration, which gets no actor)
  history_push,     // a loop's gradient: saves its input per iteration
  history_read,     // a loop's gradient: the saved value its index inputs name
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
  std::string task;         // in a cluster, the task it runs on (named in errors); else empty
  std::string device_name;  // "/cpu:0", ...: for timelines
  /// The nodes it takes values or control edges from (a recv: its send), for
  /// timelines' flow arrows (actors/trace/step_trace.hpp).
  std::vector<std::string> producers;
  uint64_t executable_id = 0;  // process-wide, for the step keys of its resource requests
  attr_map attrs;
  /// The op's kernel, made for this node (op_def::make_kernel) or the op's own.
  kernel_fn kernel;
  /// Data inputs in op order; a valid tensor here is a folded constant and
  /// receives no message. For update ops input 0 (the variable) is dropped.
  std::vector<tensor> bound_inputs;
  /// slot -> data input index, for slots that carry data; control and start
  /// slots map to -1. Every node has at least one slot.
  std::vector<int> slot_input;
  /// consumers of each output, then the control consumers (sent an empty value).
  std::vector<std::vector<consumer>> output_consumers;
  std::vector<consumer> control_consumers;
  caf::actor variable;               // the resource actor, for variable_read / variable_update
  caf::actor device;                 // where expensive kernels run
  tbb::task_arena* arena = nullptr;  // the device's threads, which a loop's kernels join
  /// A node on an accelerator: every firing goes to `device` as a gpu_task.
  accelerator* accel = nullptr;
  /// A read or an update of a variable in `accel`'s memory (launched on it).
  device_variable_ptr device_variable;
  /// On an accelerator: its constants' copies in the device's memory.
  std::shared_ptr<actorflow::device_constants> constants_on_device;
  std::shared_ptr<send_route> route;  // for sends
  /// The most messages one turn of the actor handles (0: no limit), so that
  /// a batch of steps splits in smaller waves down a segmented chain.
  size_t batch_limit = 0;

  // ---- loops (ops/control_flow.hpp) ----
  /// Inside a loop frame: the loop's nodes share one actor (see node_hosts
  /// in executable.cpp) and run their kernels on its thread.
  bool in_loop = false;
  /// Slots fed by a loop invariant (an enter marked is_constant): their value
  /// comes once per frame and serves every iteration. Empty when none.
  std::vector<bool> invariant_slot;
  size_t num_invariant_slots = 0;
  /// A switch on a loop's predicate: it ends the loop when false.
  bool loop_switch = false;
  /// On one loop switch per frame: the nodes before the switches (the
  /// predicate's) that hold loop invariants. Their iterations all carry live
  /// values, so they hear where the frame ended from here (frame_end_atom).
  std::vector<consumer> frame_end_listeners;
  /// enter: the id of the frame it opens (mixed with the parent's).
  uint64_t frame_id = 0;
  /// A loop merge: its loop's name (for errors), the bound on iterations (0:
  /// none), and the gate shared by the loop's variables (null: one variable).
  std::string loop_name;
  int64_t max_iterations = 0;
  std::shared_ptr<loop_gate> gate;
  size_t gate_var = 0;
  /// history_push / history_read: the store they share; whether a read
  /// lets go of the value (see loop_history::take).
  std::shared_ptr<loop_history> history;
  bool history_pop = false;

  size_t num_slots() const { return slot_input.size(); }
};

using node_plan_ptr = std::shared_ptr<const node_plan>;

/// Loop state (per-iteration inputs, per-frame invariants) node actors hold
/// across all executables in this process: 0 once every step has ended.
int64_t loop_states_held();

/// Spawns the actor that runs the nodes of `members` for every step; a
/// message for the node members[i] carries member i. Most nodes have an
/// actor of their own; a loop's run together in one, so that the values
/// between them (several per iteration) are calls, not messages. The
/// plans may still be completed (their consumers named) after the spawn,
/// before the first step starts.
caf::actor spawn_node_host(caf::actor_system& system, std::vector<node_plan_ptr> members);

}  // namespace actorflow
