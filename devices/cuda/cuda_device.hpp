// One GPU (CUDA builds only; the header itself is plain C++).
//
// Streams: `compute_streams` for kernels (stream 0 first), then one for
// host-to-device and one for device-to-host copies, so that copies overlap
// kernels. Each compute stream has its own cuBLAS and cuDNN handles bound to
// it. Order across streams comes from events (order()), never from the host
// waiting. Memory comes from a caching allocator over cudaMalloc (never
// managed memory), staging buffers from one over pinned host memory.
//
// Nothing here blocks the calling thread except synchronize() and
// copy_to_host(), which are for tests, tools and shutdown, not for CAF threads.
// The device actor (spawn_gpu_device) drives a cuda_device as its
// stream_executor: completion comes back from a stream callback as a message.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "devices/cuda/device_tensor.hpp"
#include "devices/cuda/gpu_device_actor.hpp"
#include "devices/cuda/gpu_kernel.hpp"

namespace actorflow::gpu {

struct cuda_device_options {
  int ordinal = 0;
  int compute_streams = 1;
  /// Arithmetic of float32 matmul and conv2d (exact float32 unless asked).
  gpu_math math = gpu_math::fp32;
  /// cuBLAS workspace per compute stream, from the caching allocator, so
  /// cuBLAS does not cudaMalloc in the step path (32 MiB suits Hopper).
  size_t cublas_workspace_bytes = size_t{32} << 20;
};

class cuda_device final : public stream_executor {
 public:
  /// Opens GPU `options.ordinal`; throws "[gpu device] no CUDA device: ..." or
  /// the CUDA error that stopped it.
  explicit cuda_device(cuda_device_options options = {});
  /// Waits for the streams, then frees the streams, handles and cached memory.
  ~cuda_device() override;
  cuda_device(const cuda_device&) = delete;
  cuda_device& operator=(const cuda_device&) = delete;

  int ordinal() const;
  /// The GPU's name and compute capability, e.g. "NVIDIA H100 80GB HBM3 (sm_90)".
  std::string description() const;
  const cuda_device_options& options() const;
  int compute_streams() const;
  int h2d_stream() const;
  int d2h_stream() const;
  gpu_stream& stream(int s);
  const std::shared_ptr<caching_allocator>& memory() const;
  const std::shared_ptr<caching_allocator>& staging() const;

  // stream_executor: work launched on stream s runs now, on the calling
  // thread, with this device current; it enqueues and returns.
  int num_streams() const override;
  void launch(int s, std::function<void()> work) override;
  bool enqueues_on_call() const override { return true; }
  /// done(error) runs on a CUDA driver thread once stream s has run its work
  /// so far, also when the device failed (cudaStreamAddCallback, which unlike
  /// cudaLaunchHostFunc reports errors instead of dropping the callback). It
  /// must not call CUDA or release device tensors.
  void when_done(int s, std::function<void(std::string error)> done) override;
  /// Makes stream `to` wait, on the GPU, for the work enqueued on `from` so far.
  void order(int from, int to);

  /// Host to device: through a pinned staging buffer on the h2d stream; the
  /// result may be used on `consumer` (ordered after the copy).
  device_tensor upload(const tensor& host, int consumer = 0);
  /// Device to host: through a pinned staging buffer on the d2h stream, after
  /// the work enqueued on `producer` so far; done(tensor, error) runs as for when_done.
  void download(const device_tensor& t, int producer,
                std::function<void(tensor, std::string error)> done);
  /// download() and wait for it: tests and tools only.
  tensor copy_to_host(const device_tensor& t, int producer = 0);

  /// Runs op's GPU kernel on stream s: checks that it has one for these
  /// dtypes, runs the op's shape function on the input specs, and enqueues.
  /// The outputs are ready once the stream has run the work.
  /// `io`: the launch's host values and invocation, and where the kernel's
  /// host-memory outputs go (their device tensors are then empty).
  std::vector<device_tensor> run_kernel(const std::string& op, std::vector<device_tensor> inputs,
                                        const attr_map& attrs = {}, int s = 0,
                                        const std::string& node_name = "", kernel_io* io = nullptr);
  /// Applies an optimizer update to a variable on the GPU; `inputs` excludes
  /// the variable (gradient, learning rate), as for update_fn.
  std::vector<device_tensor> run_update(const std::string& op, gpu_variable_state& v,
                                        std::vector<device_tensor> inputs,
                                        const attr_map& attrs = {}, int s = 0,
                                        const std::string& node_name = "", kernel_io* io = nullptr);

  /// Waits until every stream is idle; throws the device's error, if any.
  void synchronize();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace actorflow::gpu
