// How a node's values leave it: the actor that runs nodes (node_host_base,
// with its queue of values between its own nodes), delivery to a consumer,
// and a kernel run whose outputs (or error) go to every consumer.
#pragma once
#include <caf/all.hpp>
#include <deque>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/node_plan.hpp"

namespace actorflow {

// The actor that runs one or more nodes; what the nodes need of it beside
// CAF's: the queue of values between its own nodes.
class node_host_base : public caf::event_based_actor {
 public:
  using caf::event_based_actor::event_based_actor;
  void queue_local(step_input&& in) { local_.push_back(std::move(in)); }
  /// Handles the queued local values (a turn's worth); called after every
  /// message that may have queued some.
  virtual void drain_local() = 0;

 protected:
  std::deque<step_input> local_;
};

/// Delivers one value to a consumer (see node_output.cpp). `self` is the
/// producing node's actor, or null on a pool thread.
void deliver(node_host_base* self, const consumer& to, step_input&& in);
/// Sends a step's outputs (or its error) to every consumer.
void emit(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
          std::vector<tensor>& outputs, const std::string& error);
/// Sends an accelerator launch's outputs on: in device memory to consumers
/// on the same device, host copies to the others.
void emit_launched(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
                   const accelerator_launch& launch);
/// Sends a dead value to every consumer: this node did not run in the step.
void emit_dead(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
               dead_kind why);
/// "node 'name' (op) on task: what".
std::string describe_failure(const node_plan& plan, const std::string& what);
/// Runs the kernel and emits its outputs or the error it threw (`self` as in
/// deliver). `inputs` and `outputs` are the caller's to reuse: `inputs` comes
/// back holding just the folded constants, `outputs` empty.
void run_and_emit(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
                  std::vector<tensor>& inputs, std::vector<tensor>& outputs, uint64_t invocation);

}  // namespace actorflow
