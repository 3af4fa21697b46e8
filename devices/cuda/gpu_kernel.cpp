#include "devices/cuda/gpu_kernel.hpp"

#include <algorithm>

namespace actorflow::gpu {

const tensor& gpu_kernel_context::host_value(size_t i) const {
  if (i >= host_values.size() || !host_values[i].valid())
    actorflow::fail(op, "input " + std::to_string(i) +
                            " must come in host memory (a host_memory_inputs " +
                            "input of the op), but came in device memory");
  return host_values[i];
}

void gpu_kernel_context::set_host_output(size_t i, tensor t) {
  if (host_outputs.size() < output_specs.size()) host_outputs.resize(output_specs.size());
  if (outputs.size() < output_specs.size()) outputs.resize(output_specs.size());
  host_outputs.at(i) = std::move(t);
}

device_tensor& gpu_kernel_context::allocate_output(size_t i) {
  if (i >= output_specs.size())
    fail("output " + std::to_string(i) + " of " + std::to_string(output_specs.size()) +
         " allocated");
  const tensor_spec& spec = output_specs[i];
  if (!spec.dims.is_fully_defined())
    fail("output " + std::to_string(i) + " has the partial shape " + spec.dims.to_string());
  if (outputs.size() <= i) outputs.resize(i + 1);
  outputs[i] = device_tensor::allocate(memory, stream_index, spec.type, spec.dims);
  return outputs[i];
}

void gpu_kernel_context::set_output(size_t i, device_tensor t) {
  if (outputs.size() <= i) outputs.resize(i + 1);
  outputs[i] = std::move(t);
}

device_tensor gpu_kernel_context::allocate_temp(dtype type, shape dims) {
  return device_tensor::allocate(memory, stream_index, type, std::move(dims));
}

bool gpu_kernel_def::supports(dtype t) const {
  return std::find(types.begin(), types.end(), t) != types.end();
}

gpu_kernel_registry& gpu_kernel_registry::global() {
  static gpu_kernel_registry registry;
  return registry;
}

void gpu_kernel_registry::add(gpu_kernel_def def) {
  if (def.op.empty()) fail("gpu kernels", "a GPU kernel without an op name");
  if (static_cast<bool>(def.kernel) == static_cast<bool>(def.update))
    fail("gpu kernels", "GPU kernel '" + def.op + "' needs exactly one of kernel and update");
  if (def.types.empty()) fail("gpu kernels", "GPU kernel '" + def.op + "' handles no dtype");
  std::lock_guard<std::mutex> lock(mutex_);
  auto name = def.op;
  if (!kernels_.emplace(name, std::make_unique<gpu_kernel_def>(std::move(def))).second)
    fail("gpu kernels", "op '" + name + "' has two GPU kernels");
}

const gpu_kernel_def* gpu_kernel_registry::find(const std::string& op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = kernels_.find(op);
  return it == kernels_.end() ? nullptr : it->second.get();
}

std::vector<const gpu_kernel_def*> gpu_kernel_registry::all() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const gpu_kernel_def*> out;
  for (auto& [name, def] : kernels_) out.push_back(def.get());
  return out;
}

}  // namespace actorflow::gpu
