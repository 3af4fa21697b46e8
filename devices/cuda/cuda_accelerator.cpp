#include "devices/cuda/cuda_accelerator.hpp"

#include <atomic>
#include <mutex>

#include "core/error.hpp"
#include "devices/cuda/cuda_device.hpp"

namespace actorflow::gpu {

namespace {

// cuda_device's layout with one compute stream: compute, host to device,
// device to host.
constexpr int compute_stream = 0;
constexpr int streams_per_device = 3;

class cuda_accelerator;

// The device actor's streams: the GPU's, opened on the first launch.
class opened_on_use final : public stream_executor {
 public:
  explicit opened_on_use(cuda_accelerator* owner) : owner_(owner) {}
  int num_streams() const override { return streams_per_device; }
  void launch(int s, std::function<void()> work) override;
  void when_done(int s, std::function<void(std::string)> done) override;

 private:
  cuda_accelerator* owner_;
};

class cuda_accelerator final : public accelerator {
 public:
  explicit cuda_accelerator(int ordinal)
      : name_("/gpu:" + std::to_string(ordinal)),
        ordinal_(ordinal),
        streams_(std::make_shared<opened_on_use>(this)) {}

  const std::string& name() const override { return name_; }

  // As cuda_device::run_kernel selects: by the dtype of the kernel's type input.
  bool has_kernel(const op_def& def, const std::vector<dtype>& input_types) const override {
    const gpu_kernel_def* k = gpu_kernel_registry::global().find(def.name);
    if (!k || !k->kernel) return false;
    auto at = static_cast<size_t>(k->type_input);
    return at >= input_types.size() || k->supports(input_types[at]);
  }

  std::shared_ptr<stream_executor> streams() const override { return streams_; }

  void enqueue(int s, accelerator_launch& launch) override {
    cuda_device& dev = device();
    ++launches_;
    try {
      std::vector<device_tensor> inputs;
      for (size_t i = 0; i < launch.host_inputs.size(); ++i) {
        const device_value_ptr& in = launch.device_inputs[i];
        if (in && in->owner != this) fail(name_, "input " + std::to_string(i) + " lives elsewhere");
        if (in) {
          inputs.push_back(in->tensor);
        } else {
          bytes_in_ += static_cast<int64_t>(launch.host_inputs[i].size_bytes());
          inputs.push_back(dev.upload(launch.host_inputs[i], s));
        }
      }
      auto outputs =
          dev.run_kernel(launch.def->name, std::move(inputs), *launch.attrs, s, launch.node_name);
      copy_outputs(dev, s, outputs, launch);
    } catch (const std::exception& e) {
      launch.error = e.what();
      launch.failure_code = code_of(e);
    }
  }

  accelerator_stats stats() const override {
    accelerator_stats s;
    if (opened_.load()) s.memory = device_->memory()->stats();
    s.bytes_copied_in = bytes_in_.load();
    s.bytes_copied_out = bytes_out_.load();
    s.launches = launches_.load();
    return s;
  }

  cuda_device& device() {
    std::call_once(open_once_, [this] {
      try {
        device_ = std::make_unique<cuda_device>(cuda_device_options{.ordinal = ordinal_});
      } catch (const std::exception& e) {
        open_error_ = "cannot open " + name_ + ": " + e.what();
      }
      opened_.store(device_ != nullptr);
    });
    if (!device_) fail(name_, open_error_);
    return *device_;
  }

 private:
  // Each output stays on the GPU for its consumers there; the others get a
  // host copy, downloaded on the copy stream. The compute stream then waits
  // for those copies (and their callbacks, which fill host_outputs), so the
  // completion the node hears of comes after them.
  void copy_outputs(cuda_device& dev, int s, std::vector<device_tensor>& outputs,
                    accelerator_launch& launch) {
    size_t n = launch.to_host.size();
    if (outputs.size() < n) fail(name_, "the kernel produced too few outputs");
    launch.host_outputs.assign(n, tensor());
    launch.device_outputs.assign(n, nullptr);
    bool copied = false;
    for (size_t i = 0; i < n; ++i) {
      if (launch.to_host[i]) {
        bytes_out_ += static_cast<int64_t>(outputs[i].size_bytes());
        dev.download(outputs[i], s, [&launch, i](tensor out, std::string error) {
          if (error.empty())
            launch.host_outputs[i] = std::move(out);
          else
            launch.error = "copy to host: " + error;
          launch.failure_code = error_code::internal;
        });
        copied = true;
      }
      if (launch.on_device[i])
        launch.device_outputs[i] =
            std::make_shared<const device_value>(device_value{std::move(outputs[i]), this});
    }
    if (copied) dev.order(dev.d2h_stream(), s);
  }

  std::string name_;
  int ordinal_;
  std::shared_ptr<opened_on_use> streams_;
  std::once_flag open_once_;
  std::unique_ptr<cuda_device> device_;
  std::string open_error_;
  std::atomic<bool> opened_{false};
  std::atomic<int64_t> bytes_in_{0}, bytes_out_{0}, launches_{0};
};

void opened_on_use::launch(int s, std::function<void()> work) {
  owner_->device().launch(s, std::move(work));
}

void opened_on_use::when_done(int s, std::function<void(std::string)> done) {
  owner_->device().when_done(s, std::move(done));
}

}  // namespace

std::shared_ptr<accelerator> make_cuda_accelerator(int ordinal) {
  return std::make_shared<cuda_accelerator>(ordinal);
}

}  // namespace actorflow::gpu
