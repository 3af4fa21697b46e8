// GPU kernels, keyed by op name, beside the CPU kernels of the op registry.
//
// A GPU kernel enqueues work on one stream of its device and returns without
// waiting for it; its outputs are device tensors whose contents are ready once
// the stream has run that work. Validation and output shapes come from the
// op's own shape function (run on the concrete input specs before the kernel),
// so a GPU kernel only computes. Plain C++: no CUDA type appears here; the
// stream behind a context is gpu_stream (devices/cuda/cuda_stream.hpp).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/op_registry.hpp"
#include "devices/cuda/device_tensor.hpp"

namespace actorflow::gpu {

/// A stream of one device with its cuBLAS and cuDNN handles (CUDA builds only).
struct gpu_stream;

/// Arithmetic of float32 matrix products and convolutions: exact float32 (the
/// default), or TensorFloat-32 / bfloat16 tensor-core products (faster, about
/// 3 significant digits).
enum class gpu_math { fp32, tf32, bf16 };

/// What a launch brings a kernel beside its device inputs (host values of
/// its host-memory inputs, its invocation), and what the kernel gives back
/// in host memory (its op's host_memory_outputs).
struct kernel_io {
  std::vector<tensor> host_values;   // by input; empty where it came in device memory
  uint64_t invocation = 0;           // how many times the node ran before
  std::vector<tensor> host_outputs;  // by output; set for the host-memory ones
};

/// What a GPU kernel sees: its inputs on the device, attributes, the output
/// specs its op's shape function gave, and the stream to enqueue on.
struct gpu_kernel_context {
  const std::string& op;
  const std::string& node_name;
  const attr_map& attrs;
  std::vector<device_tensor> inputs;
  /// Fully defined: the shape function ran on the concrete input specs.
  std::vector<tensor_spec> output_specs;
  std::vector<device_tensor> outputs;
  gpu_stream& stream;
  int stream_index = 0;
  std::shared_ptr<caching_allocator> memory;
  gpu_math math = gpu_math::fp32;
  /// By input: its value in host memory where it came from there (always
  /// for the op's host_memory_inputs), else empty.
  std::vector<tensor> host_values = {};
  /// By output: set (set_host_output) for the op's host_memory_outputs,
  /// which have no device tensor.
  std::vector<tensor> host_outputs = {};
  /// Copies a host tensor (indices checked on the host) into device memory
  /// for this kernel's work, in stream order.
  std::function<device_tensor(const tensor&)> upload = {};
  /// How many times the node ran before (random draws count with it, as
  /// kernel_context::invocation).
  uint64_t invocation = 0;

  ACTORFLOW_ATTR_ACCESSORS
  /// Input i in host memory; fails naming the op where it is not there.
  const tensor& host_value(size_t i) const;
  const device_tensor& input(size_t i) const { return inputs[i]; }
  /// Allocates output i (uninitialized) as its spec says.
  device_tensor& allocate_output(size_t i);
  void set_output(size_t i, device_tensor t);
  /// Output i in host memory (one of the op's host_memory_outputs).
  void set_host_output(size_t i, tensor t);
  /// Scratch memory for this kernel's work on its stream (cuDNN workspaces,
  /// partial sums); dropping it after enqueueing is safe (stream order).
  device_tensor allocate_temp(dtype type, shape dims);
};

/// A variable on a GPU: its value and optimizer slots on the device; counters
/// (Adam's step) stay on the host, where the update's scalars are computed.
struct gpu_variable_state {
  device_tensor value;
  std::map<std::string, device_tensor> slots;
  std::map<std::string, int64_t> counters;
};

using gpu_kernel_fn = std::function<void(gpu_kernel_context&)>;
/// For ops applied to a variable (optimizer updates): ctx.inputs excludes the
/// variable reference (input 0), as for update_fn. Sets output 0 to the value.
using gpu_update_fn = std::function<void(gpu_variable_state&, gpu_kernel_context&)>;

struct gpu_kernel_def {
  std::string op;
  /// The dtypes handled, of input `type_input`; others stay on the CPU.
  std::vector<dtype> types;
  int type_input = 0;
  gpu_kernel_fn kernel;  // one of kernel and update is set
  gpu_update_fn update;
  /// It reads and writes bfloat16 wherever its op does (a cast to bfloat16
  /// included): placement keeps other kernels' bfloat16 nodes off the GPU.
  bool bfloat16 = false;
  /// What differs from the CPU kernel, if anything (said in docs and tests).
  std::string note;

  bool supports(dtype t) const;
};

class gpu_kernel_registry {
 public:
  static gpu_kernel_registry& global();
  /// Throws when the op already has a GPU kernel or the def is incomplete.
  void add(gpu_kernel_def def);
  /// nullptr when the op has no GPU kernel.
  const gpu_kernel_def* find(const std::string& op) const;
  std::vector<const gpu_kernel_def*> all() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<gpu_kernel_def>> kernels_;
};

/// Registers at static-initialization time (the library is shared).
struct gpu_kernel_registrar {
  explicit gpu_kernel_registrar(gpu_kernel_def def) {
    gpu_kernel_registry::global().add(std::move(def));
  }
};

/// dtype sets for kernel definitions.
inline const std::vector<dtype> float_types{dtype::float32, dtype::float64};
inline const std::vector<dtype> numeric_types{dtype::float32, dtype::float64, dtype::int32,
                                              dtype::int64, dtype::uint8};
inline const std::vector<dtype> signed_types{dtype::float32, dtype::float64, dtype::int32,
                                             dtype::int64};
inline const std::vector<dtype> all_types{dtype::float32, dtype::float64, dtype::int32,
                                          dtype::int64,   dtype::uint8,   dtype::boolean};
/// `types` and bfloat16 (the kernels that take it, with .bfloat16 set).
inline std::vector<dtype> with_bfloat16(std::vector<dtype> types) {
  types.push_back(dtype::bfloat16);
  return types;
}

}  // namespace actorflow::gpu
