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
#include <memory>
#include <string>
#include <vector>

#include "core/export.hpp"
#include "core/op_registry.hpp"
#include "devices/cuda/caching_allocator.hpp"
#include "devices/cuda/device_tensor.hpp"
#include "devices/cuda/gpu_device_actor.hpp"

namespace actorflow {

class accelerator;

/// A tensor in an accelerator's memory, as it travels between the nodes of
/// that device (step_value::on_device). Immutable once shared.
struct ACTORFLOW_API device_value {
  gpu::device_tensor tensor;
  const accelerator* owner = nullptr;
};
using device_value_ptr = std::shared_ptr<const device_value>;

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
  /// Output i goes to host memory (a consumer on another device, a fetch),
  /// stays in device memory (a consumer on this device), or both.
  std::vector<char> to_host, on_device;
  // Filled by the launch once the stream has run it:
  std::vector<tensor> host_outputs;
  std::vector<device_value_ptr> device_outputs;
  /// An error of the kernel itself (bad input values): fails the step, not
  /// the stream; and its kind (core/error.hpp: out of memory is
  /// resource_exhausted).
  std::string error;
  error_code failure_code = error_code::unknown;
};

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
  /// The streams its device actor drives.
  virtual std::shared_ptr<gpu::stream_executor> streams() const = 0;
  /// Copies in, runs the kernel and copies out on stream `s`. Called from
  /// the work function of a gpu_task (stream_executor::launch): on a GPU it
  /// enqueues and returns; launch's outputs are ready once the stream has
  /// run that work. Throws only for faults of the device itself.
  virtual void enqueue(int s, accelerator_launch& launch) = 0;
  virtual accelerator_stats stats() const = 0;
};

}  // namespace actorflow
