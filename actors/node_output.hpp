// How a node's values leave it: the actor that runs nodes (node_host_base,
// with its queue of values between its own nodes), delivery to a consumer,
// and a kernel run whose outputs (or error) go to every consumer.
#pragma once
#include <caf/all.hpp>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
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
/// A firing of `plan` (on an accelerator) with the values in `slots`: its
/// inputs, host tensors or device values as they came, and which outputs its
/// consumers want in host memory and which on the device.
std::shared_ptr<accelerator_launch> make_launch(const node_plan& plan, step_value* slots,
                                                size_t num_slots, uint64_t invocation);

/// A node's firings on an accelerator, from the gpu_task that carries one to
/// its gpu_done: no thread waits for the device.
class accelerator_launches {
 public:
  /// Sends `launch` to the plan's device actor; node `member` of `self` hears
  /// of it again by finish().
  void start(node_host_base* self, const node_plan& plan, uint32_t member, uint64_t step,
             const frame_tag& tag, std::shared_ptr<accelerator_launch> launch);
  /// Launch `id` ran: its outputs go on (in device memory to consumers on the
  /// same device, host copies to the others), or its error, or `error` (a
  /// fault of the device). Nothing for a launch of a dropped step.
  void finish(node_host_base* self, const node_plan& plan, uint64_t id, const std::string& error);
  void drop(uint64_t step);
  /// The member a launch id belongs to: it rides in the id's top bits.
  static uint32_t member_of(uint64_t id) { return static_cast<uint32_t>(id >> member_shift); }

 private:
  static constexpr int member_shift = 40;
  struct launched {
    uint64_t step;
    frame_tag tag;
    std::shared_ptr<accelerator_launch> launch;
  };
  std::unordered_map<uint64_t, launched> pending_;
  uint64_t next_ = 0;
};

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
