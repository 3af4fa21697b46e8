// An accelerator: a device with memory of its own and asynchronous streams of
// work (a GPU, or the stand-in of devices/stand_in). Its device actor
// (gpu::spawn_gpu_device) takes a node's kernel as a gpu_task and answers
// with gpu_done once the stream has run it; nothing waits for the device.
//
// A node on an accelerator gets each input either as a value already in the
// device's memory (from a producer on the same device) or as a host tensor,
// which the launch copies in; it keeps each output in device memory for the
// consumers on the same device and copies it out only for the others (the
// cut between devices inside a process).
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/export.hpp"
#include "core/op_registry.hpp"
#include "devices/cuda/caching_allocator.hpp"
#include "devices/cuda/device_tensor.hpp"
#include "devices/cuda/gpu_device_actor.hpp"
#include "devices/cuda/gpu_kernel.hpp"

namespace actorflow {

class accelerator;

/// A tensor in an accelerator's memory, as it travels between the nodes of
/// that device (step_value::on_device). Immutable once shared.
struct ACTORFLOW_API device_value {
  gpu::device_tensor tensor;
  const accelerator* owner = nullptr;
};
using device_value_ptr = std::shared_ptr<const device_value>;

/// A variable whose value and optimizer slots live in an accelerator's
/// memory. Its variable actor (actors/resources/variable_actor.hpp) owns it;
/// the nodes of the variable on that accelerator read and update it through
/// their launches (accelerator_launch::variable), and checkpoints through
/// enqueue_snapshot / enqueue_restore. Only work on the accelerator's stream
/// 0 touches `state`: its launches come one at a time, in the order they
/// were sent, so the variable's reads and updates are serialized as a
/// variable actor serializes them on a CPU.
struct ACTORFLOW_API device_variable {
  std::string name;
  /// What the graph declares (dims may be partly unknown): a restored value
  /// of another dtype or shape is refused, naming the variable and device.
  tensor_spec declared;
  gpu::gpu_variable_state state;  // state.value invalid: not initialized yet
};
using device_variable_ptr = std::shared_ptr<device_variable>;

/// Fails, naming the variable and `device`, unless `in` may be restored into
/// v: a value of v's declared dtype and compatible dims, every slot of the
/// value's shape or an optimizer counter (is_counter_slot).
ACTORFLOW_API void check_restorable(const device_variable& v, const variable_state& in,
                                    const std::string& device);
/// An optimizer's step counter (Adam's adam/t): an int64 scalar slot of a
/// variable of another dtype. On a GPU it stays on the host.
ACTORFLOW_API bool is_counter_slot(const tensor& slot, dtype value_type);

/// A node's constants (folded into it: the same tensors every firing) in an
/// accelerator's memory, copied in at the node's first launch and kept as
/// long as the node: a step copies in only what it was fed.
struct ACTORFLOW_API device_constants {
  /// Which inputs are constants, fixed when the node is planned.
  std::vector<char> is_constant;
  std::mutex mutex;
  std::vector<device_value_ptr> values;  // by input; null: not copied in yet
};

/// One kernel run on an accelerator: what a node hands it and what it gets back.
struct ACTORFLOW_API accelerator_launch {
  const op_def* def = nullptr;
  std::string node_name;
  const attr_map* attrs = nullptr;  // the node plan's, alive while the node actor is
  uint64_t invocation = 0;
  /// Input i: device_inputs[i] when it is already in this device's memory,
  /// else host_inputs[i], which the launch copies in.
  std::vector<tensor> host_inputs;
  std::vector<device_value_ptr> device_inputs;
  /// The node's constants and their device copies (null: none kept; see
  /// input_on_device).
  std::shared_ptr<device_constants> constants;
  /// Output i goes to host memory (a consumer on another device, a fetch),
  /// stays in device memory (a consumer on this device), or both.
  std::vector<char> to_host, on_device;
  /// A node of a variable on this device: its read (the `variable` op), or
  /// an op applied to it (op_def::update), whose inputs exclude the variable.
  device_variable_ptr variable;
  // Filled by the launch once the stream has run it:
  std::vector<tensor> host_outputs;
  std::vector<device_value_ptr> device_outputs;
  /// An error of the kernel itself (bad input values): fails the step, not
  /// the stream; and its kind (core/error.hpp: out of memory is
  /// resource_exhausted).
  std::string error;
  error_code failure_code = error_code::unknown;
};

/// Host input i of `launch` in the device's memory: the node's kept copy
/// when input i is a constant copied in before, else copy_in(), kept when
/// it is a constant.
ACTORFLOW_API device_value_ptr
input_on_device(accelerator_launch& launch, size_t i,
                const std::function<device_value_ptr(const tensor&)>& copy_in);

/// Copy and memory counters of an accelerator.
struct ACTORFLOW_API accelerator_stats {
  gpu::allocator_stats memory;
  int64_t bytes_copied_in = 0;   // host to device
  int64_t bytes_copied_out = 0;  // device to host
  int64_t launches = 0;
};

class ACTORFLOW_API accelerator {
 public:
  virtual ~accelerator() = default;
  /// "/stand_in:0", "/gpu:0".
  virtual const std::string& name() const = 0;
  /// Whether it runs `def` on inputs of these dtypes.
  virtual bool has_kernel(const op_def& def, const std::vector<dtype>& input_types) const = 0;
  /// Whether its kernel of `def` reads and writes bfloat16 wherever the op
  /// does (a cast to bfloat16 included); other nodes that touch bfloat16
  /// stay off it.
  virtual bool has_bfloat16_kernel(const op_def& def) const = 0;
  /// Whether it runs update op `def` on a variable of dtype `value_type` in
  /// its memory (device_variable); a variable goes there only when it runs
  /// every op the graph applies to the variable.
  virtual bool has_update_kernel(const op_def& def, dtype value_type) const = 0;
  /// The streams its device actor drives.
  virtual std::shared_ptr<gpu::stream_executor> streams() const = 0;
  /// Copies in, runs the kernel and copies out on stream `s`. Called from
  /// the work function of a gpu_task (stream_executor::launch): on a GPU it
  /// enqueues and returns; launch's outputs are ready once the stream has
  /// run that work. Throws only for faults of the device itself.
  virtual void enqueue(int s, accelerator_launch& launch) = 0;
  /// Copies variable v's value and slots to `out` (optimizer counters as
  /// int64 scalars, as the CPU keeps them), in stream order; `out` is filled
  /// once the stream has run the work. Called as enqueue is.
  virtual void enqueue_snapshot(int s, device_variable& v, variable_state& out) = 0;
  /// Sets variable v from a host state (a checkpoint, or the value it held
  /// before it moved here). Throws, leaving v as it was, for a value that
  /// does not match v.declared.
  virtual void enqueue_restore(int s, device_variable& v, const variable_state& in) = 0;
  virtual accelerator_stats stats() const = 0;
  /// Whether an op's host_memory_outputs are ready once enqueue returns (a
  /// GPU's kernels compute them on the host as they enqueue); else they
  /// come with the stream's completion, like a copy to the host.
  virtual bool host_outputs_on_enqueue() const { return false; }
};

}  // namespace actorflow
