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

#include "actors/run/messages.hpp"
#include "actors/run/node_plan.hpp"
#include "actors/trace/step_trace.hpp"

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
/// Sends a step's outputs (or its error, of kind `code`) to every consumer.
void emit(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
          std::vector<tensor>& outputs, const std::string& error,
          error_code code = error_code::unknown);
/// Sends `first` on as output 0 just as it came, a host tensor or a value in
/// an accelerator's memory (control flow passes both on), and `second` as
/// output 1 where the node has one; or first's error.
void emit_carried(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
                  step_value first, const tensor& second = tensor());
/// `v` as consumer `c` may take it. A value in device memory goes only to a
/// consumer on that device (device_edges.hpp sees to it); anything else
/// fails the step rather than hand a kernel memory it cannot read.
step_value carried_to(const node_plan& plan, const consumer& c, step_value v);
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
  /// of it again by finish(). `trailing`: host values of the node's outputs
  /// after the launch's own, sent with them (an exit's iteration count).
  void start(node_host_base* self, const node_plan& plan, uint32_t member, uint64_t step,
             const frame_tag& tag, std::shared_ptr<accelerator_launch> launch,
             std::vector<tensor> trailing = {});
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
    int64_t started_ns = 0;  // when the step is traced
    std::vector<tensor> trailing;
  };
  std::unordered_map<uint64_t, launched> pending_;
  uint64_t next_ = 0;
};

/// A host copy of `value` (in the memory of the plan's accelerator) for the
/// consumers of output 0 off the device, in stream order: an identity
/// launch whose output goes to the host, and on the device to the others.
std::shared_ptr<accelerator_launch> make_host_copy(const node_plan& plan, device_value_ptr value,
                                                   uint64_t invocation);
/// Whether a consumer of output 0 of `plan` is off its device.
bool has_host_consumer(const node_plan& plan);

/// Sends a dead value to every consumer: this node did not run in the step.
void emit_dead(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
               dead_kind why);
/// "node 'name' (op) on task: what".
std::string describe_failure(const node_plan& plan, const std::string& what);
/// Runs the kernel and emits its outputs or the error it threw (`self` as in
/// deliver). `inputs` and `outputs` are the caller's to reuse: `inputs` comes
/// back holding just the folded constants, `outputs` empty. In a traced step
/// it records the firing; `ready_ns` is when the node had its inputs (0: now).
void run_and_emit(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
                  std::vector<tensor>& inputs, std::vector<tensor>& outputs, uint64_t invocation,
                  int64_t ready_ns = 0);

/// A timeline record of `plan`'s firing (actors/trace/step_trace.hpp), with what
/// the plan knows filled in.
node_trace trace_record(const node_plan& plan, const frame_tag& tag, trace_kind kind);
/// Bytes of the valid tensors among `values`.
int64_t bytes_of(const std::vector<tensor>& values);
/// Now, when some step in the process is traced; else 0 (no clock read).
int64_t now_if_tracing();
/// Records a send's or a recv's value in a traced step; false when the step
/// is not traced.
bool trace_transfer(const node_plan& plan, uint64_t step, const frame_tag& tag, trace_kind kind,
                    const tensor& value);
/// A send forwards its value, or the error that reached it, to the recv of
/// its edge (so the peer's step fails too instead of waiting); then it
/// reports to its coordinator through its control consumers.
void send_to_peer(node_host_base* self, const node_plan& plan, uint64_t step, const frame_tag& tag,
                  step_value* slots, size_t num_slots);
/// Records a request to the resource actor, from `asked` (0: untraced) to its answer.
void trace_resource(const node_plan& plan, uint64_t step, const frame_tag& tag, int64_t asked,
                    const std::vector<tensor>& values);

}  // namespace actorflow
