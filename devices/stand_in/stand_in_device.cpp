#include "devices/stand_in/stand_in_device.hpp"

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

void stand_in_device::enqueue(int s, accelerator_launch& launch) {
  ++launches_;
  try {
    // The kernel reads its inputs in device memory: the ones from other
    // devices are copied in first.
    std::vector<tensor> inputs(launch.host_inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      device_value_ptr in = launch.device_inputs[i];
      if (in && in->owner != this)
        fail(name_, "input " + std::to_string(i) + " lives on another device");
      if (!in) {
        if (!launch.host_inputs[i].valid()) fail(name_, "input " + std::to_string(i) + " is empty");
        in = copy_in(launch.host_inputs[i], s);
      }
      inputs[i] = tensor(in->tensor.type(), in->tensor.dims());
      if (inputs[i].size_bytes() > 0)  // an empty tensor has no buffer
        std::memcpy(inputs[i].raw_mutable_data(), in->tensor.raw_data(), inputs[i].size_bytes());
    }
    kernel_context ctx{launch.def->name, launch.node_name, *launch.attrs, std::move(inputs), {},
                       launch.invocation};
    launch.def->kernel(ctx);
    size_t n = launch.to_host.size();
    if (ctx.outputs.size() < n) fail(name_, "the kernel produced too few outputs");
    launch.host_outputs.assign(n, tensor());
    launch.device_outputs.assign(n, nullptr);
    for (size_t i = 0; i < n; ++i) {
      auto on_device = to_device_memory(ctx.outputs[i], s);  // where a GPU kernel writes
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

accelerator_stats stand_in_device::stats() const {
  accelerator_stats s;
  s.memory = memory_->stats();
  s.bytes_copied_in = bytes_in_.load();
  s.bytes_copied_out = bytes_out_.load();
  s.launches = launches_.load();
  return s;
}

}  // namespace actorflow
