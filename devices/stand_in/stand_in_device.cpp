#include "devices/stand_in/stand_in_device.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace actorflow {

namespace {

// Host memory with a budget, as a GPU has.
class limited_host_memory final : public gpu::memory_backend {
 public:
  limited_host_memory(std::string device, size_t limit)
      : device_(std::move(device)), limit_(limit), host_(gpu::make_host_backend()) {}
  void* allocate(size_t bytes) override {
    if (limit_ > 0 && held_ + bytes > limit_)
      fail(error_code::resource_exhausted, device_,
           "out of memory: " + std::to_string(bytes) + " bytes asked, " + std::to_string(held_) +
               " of " + std::to_string(limit_) + " held");
    void* p = host_->allocate(bytes);
    held_ += bytes;
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    held_ -= bytes;
    host_->deallocate(p, bytes);
  }
  std::string name() const override { return device_ + " memory"; }

 private:
  std::string device_;
  size_t limit_;
  size_t held_ = 0;  // the allocator calls the backend under its lock
  std::unique_ptr<gpu::memory_backend> host_;
};

}  // namespace

stand_in_device::stand_in_device(int index, stand_in_options options)
    : name_("/stand_in:" + std::to_string(index)),
      streams_(std::make_shared<thread_streams>(options.streams)) {
  auto* streams = streams_.get();
  memory_ = std::make_shared<gpu::caching_allocator>(
      std::make_unique<limited_host_memory>(name_, options.memory_limit),
      [streams](int s) { return streams->make_fence(s); });
}

// The streams finish their work (which may drop device values) before the
// memory goes.
stand_in_device::~stand_in_device() { streams_.reset(); }

bool stand_in_device::has_kernel(const op_def& def, const std::vector<dtype>&) const {
  return static_cast<bool>(def.kernel);
}

device_value_ptr stand_in_device::to_device_memory(const tensor& host, int s) {
  auto t = gpu::device_tensor::allocate(memory_, s, host.type(), host.dims());
  if (host.size_bytes() > 0) std::memcpy(t.raw_mutable_data(), host.raw_data(), host.size_bytes());
  return std::make_shared<const device_value>(device_value{std::move(t), this});
}

device_value_ptr stand_in_device::copy_in(const tensor& host, int s) {
  bytes_in_ += static_cast<int64_t>(host.size_bytes());
  return to_device_memory(host, s);
}

tensor stand_in_device::copy_out(const device_value& value) {
  tensor host(value.tensor.type(), value.tensor.dims());
  if (host.size_bytes() > 0)
    std::memcpy(host.raw_mutable_data(), value.tensor.raw_data(), host.size_bytes());
  bytes_out_ += static_cast<int64_t>(host.size_bytes());
  return host;
}

bool stand_in_device::has_update_kernel(const op_def& def, dtype) const {
  return static_cast<bool>(def.update);
}

tensor stand_in_device::to_host(const gpu::device_tensor& t) const {
  tensor host(t.type(), t.dims());
  if (host.size_bytes() > 0) std::memcpy(host.raw_mutable_data(), t.raw_data(), host.size_bytes());
  return host;
}

void stand_in_device::write_back(const tensor& from, gpu::device_tensor& into, int s) {
  bool fits =
      into.valid() && into.is_unique() && into.type() == from.type() && into.dims() == from.dims();
  if (!fits) into = gpu::device_tensor::allocate(memory_, s, from.type(), from.dims());
  if (from.size_bytes() > 0)
    std::memcpy(into.raw_mutable_data(), from.raw_data(), from.size_bytes());
}

std::vector<tensor> stand_in_device::host_copies(int s, accelerator_launch& launch) {
  // The kernel reads its inputs in device memory: the ones from other
  // devices are copied in first.
  std::vector<tensor> inputs(launch.host_inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    device_value_ptr in = launch.device_inputs[i];
    if (in && in->owner != this)
      fail(name_, "input " + std::to_string(i) + " lives on another device");
    if (!in) {
      if (!launch.host_inputs[i].valid()) fail(name_, "input " + std::to_string(i) + " is empty");
      in = input_on_device(launch, i, [&](const tensor& host) { return copy_in(host, s); });
    }
    inputs[i] = to_host(in->tensor);
  }
  // Done with them, as a GPU launch is once enqueued (see the CUDA device).
  launch.host_inputs.clear();
  launch.device_inputs.clear();
  return inputs;
}

std::vector<tensor> stand_in_device::run_on_host(int s, accelerator_launch& launch,
                                                 std::vector<tensor> inputs) {
  kernel_context ctx{launch.def->name, launch.node_name, *launch.attrs, std::move(inputs), {},
                     launch.invocation};
  if (!launch.variable) {
    launch.def->kernel(ctx);
    return std::move(ctx.outputs);
  }
  // A variable in this device's memory: the CPU's update on a host copy of
  // its state, written back after (its reads are an update that sets the value).
  auto& st = launch.variable->state;
  if (launch.def->role == op_role::variable) {
    if (!st.value.valid())
      fail(
          error_code::failed_precondition, name_,
          "variable '" + launch.variable->name + "' is read before it was initialized or restored");
    return {to_host(st.value)};
  }
  variable_state host;
  if (st.value.valid()) host.value = to_host(st.value);
  for (auto& [name, slot] : st.slots) host.slots[name] = to_host(slot);
  launch.def->update(host, ctx);
  if (host.value.valid()) write_back(host.value, st.value, s);
  for (auto& [name, slot] : host.slots) write_back(slot, st.slots[name], s);
  return std::move(ctx.outputs);
}

void stand_in_device::enqueue(int s, accelerator_launch& launch) {
  ++launches_;
  try {
    auto outputs = run_on_host(s, launch, host_copies(s, launch));
    size_t n = launch.to_host.size();
    if (outputs.size() < n) fail(name_, "the kernel produced too few outputs");
    launch.host_outputs.assign(n, tensor());
    launch.device_outputs.assign(n, nullptr);
    const auto& on_host = launch.def->host_memory_outputs;
    for (size_t i = 0; i < n; ++i) {
      // What a GPU kernel gives in host memory (a tensor array's written flags) stays there.
      if (std::find(on_host.begin(), on_host.end(), int(i)) != on_host.end()) {
        launch.host_outputs[i] = std::move(outputs[i]);
        continue;
      }
      auto on_device = to_device_memory(outputs[i], s);  // where a GPU kernel writes
      if (launch.to_host[i]) launch.host_outputs[i] = copy_out(*on_device);
      if (launch.on_device[i]) launch.device_outputs[i] = std::move(on_device);
    }
  } catch (const std::exception& e) {
    launch.error = e.what();
    launch.failure_code = code_of(e);
    launch.host_outputs.clear();
    launch.device_outputs.clear();
  }
}

void stand_in_device::enqueue_snapshot(int, device_variable& v, variable_state& out) {
  out = variable_state{};
  if (!v.state.value.valid()) return;
  out.value = to_host(v.state.value);
  for (auto& [name, slot] : v.state.slots) out.slots[name] = to_host(slot);
  bytes_out_ += static_cast<int64_t>(out.value.size_bytes());
  for (auto& [name, slot] : out.slots) bytes_out_ += static_cast<int64_t>(slot.size_bytes());
}

void stand_in_device::enqueue_restore(int s, device_variable& v, const variable_state& in) {
  check_restorable(v, in, name_);
  gpu::gpu_variable_state st;
  st.value = copy_in(in.value, s)->tensor;
  for (auto& [name, slot] : in.slots) st.slots[name] = copy_in(slot, s)->tensor;
  v.state = std::move(st);
}

accelerator_stats stand_in_device::stats() const {
  accelerator_stats s;
  s.memory = memory_->stats();
  s.bytes_copied_in = bytes_in_.load();
  s.bytes_copied_out = bytes_out_.load();
  s.launches = launches_.load();
  return s;
}

}  // namespace actorflow
