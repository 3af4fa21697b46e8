#include "devices/cuda/cuda_device.hpp"

#include <cstring>
#include <future>

#include "devices/cuda/cuda_check.hpp"
#include "devices/cuda/cuda_launch_errors.hpp"
#include "devices/cuda/cuda_memory.hpp"
#include "devices/cuda/cuda_stream.hpp"
#include "devices/cuda/gpu_support.hpp"

namespace actorflow::gpu {

struct cuda_device::impl {
  cuda_device_options options;
  std::string description;
  std::shared_ptr<fence_streams> fences;
  std::shared_ptr<event_pool> events;
  std::vector<gpu_stream> streams;
  std::shared_ptr<caching_allocator> memory;
  std::shared_ptr<caching_allocator> staging;
  std::vector<device_tensor> cublas_workspaces;

  void activate() const {
    check_cuda(cudaSetDevice(options.ordinal), "gpu device", "cudaSetDevice");
  }
  gpu_stream& at(int s) {
    if (s < 0 || s >= static_cast<int>(streams.size()))
      fail("gpu device", "stream " + std::to_string(s) + " of " + std::to_string(streams.size()));
    return streams[static_cast<size_t>(s)];
  }
};

namespace {

// The payload of a stream callback: the function to call with the stream's status.
using done_fn = std::function<void(std::string)>;

void CUDART_CB stream_done(cudaStream_t, cudaError_t status, void* payload) {
  std::unique_ptr<done_fn> done(static_cast<done_fn*>(payload));
  (*done)(status == cudaSuccess ? std::string() : cuda_error_text(status, "stream work"));
}

}  // namespace

cuda_device::cuda_device(cuda_device_options options) : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.options = options;
  const auto& found = discover_gpus();
  if (found.count == 0) fail("gpu device", found.reason);
  if (options.ordinal < 0 || options.ordinal >= found.count)
    fail("gpu device", "no GPU " + std::to_string(options.ordinal) + ": this process sees " +
                           std::to_string(found.count));
  if (options.compute_streams < 1) fail("gpu device", "needs at least one compute stream");
  d.activate();
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, options.ordinal), "gpu device",
             "cudaGetDeviceProperties");
  d.description = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                  std::to_string(prop.minor) + ")";

  d.events = std::make_shared<event_pool>(options.ordinal);
  d.fences = std::make_shared<fence_streams>();
  d.fences->ordinal = options.ordinal;
  d.fences->events = d.events;
  const int total = options.compute_streams + 2;
  for (int s = 0; s < total; ++s) {
    gpu_stream st;
    st.index = s;
    st.device = this;
    check_cuda(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking), "gpu device",
               "cudaStreamCreateWithFlags");
    d.streams.push_back(st);
    d.fences->streams.push_back(st.stream);
  }
  d.memory = std::make_shared<caching_allocator>(make_device_backend(options.ordinal),
                                                 make_event_fences(d.fences));
  d.staging = std::make_shared<caching_allocator>(
      make_pinned_backend(options.ordinal), make_event_fences(d.fences),
      caching_allocator_options{.stream_ordered_reuse = false});
  for (int s = 0; s < options.compute_streams; ++s) {
    gpu_stream& st = d.streams[static_cast<size_t>(s)];
    check_cublas(cublasCreate(&st.cublas), "gpu device", "cublasCreate");
    check_cublas(cublasSetStream(st.cublas, st.stream), "gpu device", "cublasSetStream");
    if (options.cublas_workspace_bytes > 0) {
      auto ws = device_tensor::allocate(
          d.memory, s, dtype::uint8, shape{static_cast<int64_t>(options.cublas_workspace_bytes)});
      check_cublas(cublasSetWorkspace(st.cublas, ws.raw_mutable_data(), ws.size_bytes()),
                   "gpu device", "cublasSetWorkspace");
      d.cublas_workspaces.push_back(std::move(ws));
    }
    check_cudnn(cudnnCreate(&st.cudnn), "gpu device", "cudnnCreate");
    check_cudnn(cudnnSetStream(st.cudnn, st.stream), "gpu device", "cudnnSetStream");
  }
}

cuda_device::~cuda_device() {
  auto& d = *impl_;
  cudaSetDevice(d.options.ordinal);
  for (auto& st : d.streams) cudaStreamSynchronize(st.stream);
  d.cublas_workspaces.clear();
  for (auto& st : d.streams) {
    if (st.cublas) cublasDestroy(st.cublas);
    if (st.cudnn) cudnnDestroy(st.cudnn);
  }
  // The streams are idle: from now on every fence is done, and cached memory
  // goes back now; tensors that outlive the device return theirs when they drop.
  d.fences->closed = true;
  d.memory->release_cached();
  d.staging->release_cached();
  for (auto& st : d.streams) cudaStreamDestroy(st.stream);
}

int cuda_device::ordinal() const { return impl_->options.ordinal; }
std::string cuda_device::description() const { return impl_->description; }
const cuda_device_options& cuda_device::options() const { return impl_->options; }
int cuda_device::compute_streams() const { return impl_->options.compute_streams; }
int cuda_device::h2d_stream() const { return impl_->options.compute_streams; }
int cuda_device::d2h_stream() const { return impl_->options.compute_streams + 1; }
gpu_stream& cuda_device::stream(int s) { return impl_->at(s); }
const std::shared_ptr<caching_allocator>& cuda_device::memory() const { return impl_->memory; }
const std::shared_ptr<caching_allocator>& cuda_device::staging() const { return impl_->staging; }
int cuda_device::num_streams() const { return static_cast<int>(impl_->streams.size()); }

void cuda_device::launch(int s, std::function<void()> work) {
  impl_->at(s);
  impl_->activate();
  take_launch_error();  // a failure of work launched elsewhere is not this work's
  work();
  // Launch errors (bad configuration, a sticky device error) show up here;
  // errors while the kernels run reach when_done's callback.
  cudaError_t e = take_launch_error();
  if (e == cudaSuccess) e = cudaGetLastError();
  check_cuda(e, "gpu device", "launch on stream " + std::to_string(s));
}

void cuda_device::when_done(int s, std::function<void(std::string)> done) {
  gpu_stream& st = impl_->at(s);
  impl_->activate();
  auto payload = std::make_unique<done_fn>(std::move(done));
  check_cuda(cudaStreamAddCallback(st.stream, stream_done, payload.get(), 0), "gpu device",
             "cudaStreamAddCallback");
  payload.release();  // stream_done owns it now
}

void cuda_device::order(int from, int to) {
  if (from == to) return;
  gpu_stream& a = impl_->at(from);
  gpu_stream& b = impl_->at(to);
  impl_->activate();
  // cudaStreamWaitEvent takes the event's state when it is called, so the
  // event may go back to the pool (and be recorded again) right after.
  cudaEvent_t e = impl_->events->get();
  cudaError_t err = cudaEventRecord(e, a.stream);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(b.stream, e, 0);
  impl_->events->put(e);
  check_cuda(err, "gpu device",
             "ordering stream " + std::to_string(to) + " after " + std::to_string(from));
}

device_tensor cuda_device::upload(const tensor& host, int consumer) {
  auto& d = *impl_;
  d.at(consumer);
  d.activate();
  const int h2d = h2d_stream();
  // Allocated for the copy stream (which writes it), recorded on the consumer.
  auto t = device_tensor::allocate(d.memory, h2d, host.type(), host.dims());
  const size_t bytes = host.size_bytes();
  if (bytes > 0) {
    void* staging = d.staging->allocate(bytes, h2d);
    std::memcpy(staging, host.raw_data(), bytes);
    cudaError_t e = cudaMemcpyAsync(t.raw_mutable_data(), staging, bytes, cudaMemcpyHostToDevice,
                                    d.at(h2d).stream);
    // Not reused before the copy has read it: pinned reuse waits for the fence.
    d.staging->deallocate(staging);
    check_cuda(e, "gpu device", "cudaMemcpyAsync host to device");
  }
  t.record_stream(consumer);
  order(h2d, consumer);
  return t;
}

void cuda_device::download(const device_tensor& t, int producer,
                           std::function<void(tensor, std::string)> done) {
  auto& d = *impl_;
  d.at(producer);
  d.activate();
  const int d2h = d2h_stream();
  order(producer, d2h);
  t.record_stream(d2h);  // its block waits for the copy before reuse
  const size_t bytes = t.size_bytes();
  void* staging = bytes > 0 ? d.staging->allocate(bytes, d2h) : nullptr;
  if (bytes > 0) {
    cudaError_t e =
        cudaMemcpyAsync(staging, t.raw_data(), bytes, cudaMemcpyDeviceToHost, d.at(d2h).stream);
    if (e != cudaSuccess) {
      d.staging->deallocate(staging);
      check_cuda(e, "gpu device", "cudaMemcpyAsync device to host");
    }
  }
  // The callback copies out of the staging buffer and gives it back (a queue
  // push: no CUDA call); it holds no device tensor.
  auto staging_memory = d.staging;
  when_done(d2h, [staging, staging_memory, type = t.type(), dims = t.dims(), bytes,
                  done = std::move(done)](std::string error) {
    tensor out;
    if (error.empty()) {
      out = tensor(type, dims);
      if (bytes > 0) std::memcpy(out.raw_mutable_data(), staging, bytes);
    }
    if (staging) staging_memory->deallocate(staging);
    done(std::move(out), std::move(error));
  });
}

tensor cuda_device::copy_to_host(const device_tensor& t, int producer) {
  std::promise<std::pair<tensor, std::string>> result;
  auto ready = result.get_future();
  download(t, producer, [&result](tensor out, std::string error) {
    result.set_value({std::move(out), std::move(error)});
  });
  auto [out, error] = ready.get();
  if (!error.empty()) fail("gpu device", "copy to host: " + error);
  return out;
}

namespace {

const gpu_kernel_def& gpu_kernel_for(const std::string& op, const std::vector<device_tensor>& in,
                                     bool update) {
  const gpu_kernel_def* k = gpu_kernel_registry::global().find(op);
  if (!k || static_cast<bool>(k->update) != update) fail(op, "has no GPU kernel");
  // For updates, the variable is not among the inputs: its dtype is checked by
  // the shape function against the gradient's (input 0 here).
  const size_t at = update ? 0 : static_cast<size_t>(k->type_input);
  if (at < in.size() && !k->supports(in[at].type())) {
    std::string types;
    for (dtype t : k->types) types += std::string(types.empty() ? "" : ", ") + dtype_name(t);
    fail(op, std::string("the GPU kernel takes ") + types + ", not " + dtype_name(in[at].type()));
  }
  return *k;
}

std::vector<tensor_spec> specs_of(const std::vector<device_tensor>& in) {
  std::vector<tensor_spec> specs;
  for (auto& t : in) specs.push_back({t.type(), t.dims()});
  return specs;
}

void check_outputs(const std::string& op, const gpu_kernel_context& ctx) {
  const auto& outs = ctx.outputs;
  const auto& specs = ctx.output_specs;
  if (outs.size() != specs.size())
    fail(op, "the GPU kernel set " + std::to_string(outs.size()) + " outputs, not " +
                 std::to_string(specs.size()));
  for (size_t i = 0; i < outs.size(); ++i) {
    const tensor* host =
        i < ctx.host_outputs.size() && ctx.host_outputs[i].valid() ? &ctx.host_outputs[i] : nullptr;
    if (host && host->type() == specs[i].type && host->dims() == specs[i].dims) continue;
    if (!outs[i].valid() || outs[i].type() != specs[i].type || outs[i].dims() != specs[i].dims)
      fail(op, "the GPU kernel's output " + std::to_string(i) + " is " +
                   (outs[i].valid() ? outs[i].describe() : std::string("unset")) +
                   ", not the inferred " + specs[i].to_string());
  }
}

// The context's part of the launch's host values, invocation and host outputs.
void take_io(gpu_kernel_context& ctx, kernel_io* io) {
  if (!io) return;
  ctx.host_values = std::move(io->host_values);
  ctx.invocation = io->invocation;
}
void give_io(gpu_kernel_context& ctx, kernel_io* io) {
  if (io) io->host_outputs = std::move(ctx.host_outputs);
}

}  // namespace

std::vector<device_tensor> cuda_device::run_kernel(const std::string& op,
                                                   std::vector<device_tensor> inputs,
                                                   const attr_map& attrs, int s,
                                                   const std::string& node_name, kernel_io* io) {
  const op_def& def = op_registry::global().get(op);
  const gpu_kernel_def& k = gpu_kernel_for(op, inputs, false);
  for (auto& t : inputs) t.record_stream(s);  // read there, whatever stream made them
  auto out_specs = infer_outputs(def, specs_of(inputs), attrs);
  const std::string& name = node_name.empty() ? op : node_name;
  gpu_kernel_context ctx{def.name, name,         attrs, std::move(inputs), std::move(out_specs),
                         {},       impl_->at(s), s,     impl_->memory,     impl_->options.math};
  take_io(ctx, io);
  ctx.upload = [this, s](const tensor& host) { return upload(host, s); };
  launch(s, [&] { k.kernel(ctx); });
  check_outputs(op, ctx);
  give_io(ctx, io);
  return std::move(ctx.outputs);
}

std::vector<device_tensor> cuda_device::run_update(const std::string& op, gpu_variable_state& v,
                                                   std::vector<device_tensor> inputs,
                                                   const attr_map& attrs, int s,
                                                   const std::string& node_name, kernel_io* io) {
  const op_def& def = op_registry::global().get(op);
  const gpu_kernel_def& k = gpu_kernel_for(op, inputs, true);
  for (auto& t : inputs) t.record_stream(s);
  v.value.record_stream(s);
  for (auto& [slot, t] : v.slots) t.record_stream(s);
  auto specs = specs_of(inputs);
  // The kernels say whether they take an uninitialized variable (assign
  // does); meanwhile the shape function sees it as its first value's spec.
  tensor_spec var = v.value.valid() ? tensor_spec{v.value.type(), v.value.dims()}
                    : specs.empty() ? tensor_spec{dtype::float32, shape{}}
                                    : specs.front();
  specs.insert(specs.begin(), var);
  auto out_specs = infer_outputs(def, specs, attrs);
  const std::string& name = node_name.empty() ? op : node_name;
  gpu_kernel_context ctx{def.name, name,         attrs, std::move(inputs), std::move(out_specs),
                         {},       impl_->at(s), s,     impl_->memory,     impl_->options.math};
  take_io(ctx, io);
  ctx.upload = [this, s](const tensor& host) { return upload(host, s); };
  launch(s, [&] { k.update(v, ctx); });
  check_outputs(op, ctx);
  give_io(ctx, io);
  return std::move(ctx.outputs);
}

void cuda_device::synchronize() {
  impl_->activate();
  for (auto& st : impl_->streams)
    check_cuda(cudaStreamSynchronize(st.stream), "gpu device",
               "stream " + std::to_string(st.index));
  impl_->memory->collect();
  impl_->staging->collect();
}

}  // namespace actorflow::gpu
