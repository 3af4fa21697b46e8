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
  bool enqueues_on_call() const override { return true; }
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

  bool has_bfloat16_kernel(const op_def& def) const override {
    const gpu_kernel_def* k = gpu_kernel_registry::global().find(def.name);
    return k && k->kernel && k->bfloat16;
  }

  bool has_update_kernel(const op_def& def, dtype value_type) const override {
    const gpu_kernel_def* k = gpu_kernel_registry::global().find(def.name);
    return k && k->update && k->supports(value_type);
  }

  std::shared_ptr<stream_executor> streams() const override { return streams_; }
  bool host_outputs_on_enqueue() const override { return true; }

  void enqueue(int s, accelerator_launch& launch) override {
    cuda_device& dev = device();
    ++launches_;
    try {
      std::vector<device_tensor> inputs = device_inputs(dev, s, launch);
      kernel_io io{host_memory_values(launch), launch.invocation, {}};
      // Enqueued work keeps what it reads (record_stream, stream order): the
      // launch lets go of its inputs now, so that a variable's next update
      // finds its value unshared and writes it in place.
      launch.host_inputs.clear();
      launch.device_inputs.clear();
      std::vector<device_tensor> outputs;
      if (!launch.variable)
        outputs = dev.run_kernel(launch.def->name, std::move(inputs), *launch.attrs, s,
                                 launch.node_name, &io);
      else
        outputs = run_on_variable(dev, s, launch, std::move(inputs), io);
      copy_outputs(dev, s, outputs, io.host_outputs, launch);
    } catch (const std::exception& e) {
      launch.error = e.what();
      launch.failure_code = code_of(e);
    }
  }

  void enqueue_snapshot(int s, device_variable& v, variable_state& out) override {
    cuda_device& dev = device();
    auto& st = v.state;
    out = variable_state{};
    if (!st.value.valid()) return;
    auto fetch = [&](const device_tensor& t, tensor& into) {
      bytes_out_ += static_cast<int64_t>(t.size_bytes());
      dev.download(t, s, [&into](tensor host, std::string error) {
        if (error.empty()) into = std::move(host);  // left empty: the snapshot fails
      });
    };
    fetch(st.value, out.value);
    for (auto& [name, t] : st.slots) fetch(t, out.slots[name]);
    for (auto& [name, count] : st.counters) out.slots[name] = tensor::scalar<int64_t>(count);
    dev.order(dev.d2h_stream(), s);  // s's completion comes after the copies
  }

  void enqueue_restore(int s, device_variable& v, const variable_state& in) override {
    check_restorable(v, in, name_);
    cuda_device& dev = device();
    gpu_variable_state st;
    auto upload = [&](const tensor& t) {
      bytes_in_ += static_cast<int64_t>(t.size_bytes());
      return dev.upload(t, s);
    };
    st.value = upload(in.value);
    for (auto& [name, slot] : in.slots) {
      if (is_counter_slot(slot, in.value.type()))
        st.counters[name] = slot.data<int64_t>()[0];
      else
        st.slots[name] = upload(slot);
    }
    v.state = std::move(st);
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
  // The launch's inputs in this GPU's memory: host ones uploaded for stream s.
  std::vector<device_tensor> device_inputs(cuda_device& dev, int s, accelerator_launch& launch) {
    std::vector<device_tensor> inputs;
    for (size_t i = 0; i < launch.host_inputs.size(); ++i) {
      const device_value_ptr& in = launch.device_inputs[i];
      if (in && in->owner != this) fail(name_, "input " + std::to_string(i) + " lives elsewhere");
      if (in) {
        inputs.push_back(in->tensor);
      } else {
        auto copied = input_on_device(launch, i, [&](const tensor& host) {
          bytes_in_ += static_cast<int64_t>(host.size_bytes());
          return std::make_shared<const device_value>(device_value{dev.upload(host, s), this});
        });
        inputs.push_back(copied->tensor);
      }
    }
    return inputs;
  }

  // The op's host_memory_inputs as they came, in host memory (the others empty).
  static std::vector<tensor> host_memory_values(const accelerator_launch& launch) {
    std::vector<tensor> values(launch.host_inputs.size());
    for (int i : launch.def->host_memory_inputs)
      if (static_cast<size_t>(i) < values.size() && !launch.device_inputs[static_cast<size_t>(i)])
        values[static_cast<size_t>(i)] = launch.host_inputs[static_cast<size_t>(i)];
    return values;
  }

  // A node of a variable in this GPU's memory: its read, or an update kernel.
  std::vector<device_tensor> run_on_variable(cuda_device& dev, int s, accelerator_launch& launch,
                                             std::vector<device_tensor> inputs, kernel_io& io) {
    gpu_variable_state& st = launch.variable->state;
    if (launch.def->role != op_role::variable)
      return dev.run_update(launch.def->name, st, std::move(inputs), *launch.attrs, s,
                            launch.node_name, &io);
    if (!st.value.valid())
      fail(
          error_code::failed_precondition, name_,
          "variable '" + launch.variable->name + "' is read before it was initialized or restored");
    return {st.value};
  }

  // Each output stays on the GPU for its consumers there; the others get a
  // host copy, downloaded on the copy stream. The compute stream then waits
  // for those copies (and their callbacks, which fill host_outputs), so the
  // completion the node hears of comes after them.
  // An output the kernel gave in host memory goes to every consumer as it is.
  void copy_outputs(cuda_device& dev, int s, std::vector<device_tensor>& outputs,
                    std::vector<tensor>& host_outputs, accelerator_launch& launch) {
    size_t n = launch.to_host.size();
    if (outputs.size() < n) fail(name_, "the kernel produced too few outputs");
    launch.host_outputs.assign(n, tensor());
    launch.device_outputs.assign(n, nullptr);
    bool copied = false;
    for (size_t i = 0; i < n; ++i) {
      if (i < host_outputs.size() && host_outputs[i].valid()) {
        launch.host_outputs[i] = std::move(host_outputs[i]);
        continue;
      }
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
