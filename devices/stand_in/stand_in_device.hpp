// The accelerator stand-in: a device with the GPU's protocol and no GPU. It
// has a memory pool of its own (a caching allocator over host memory, with
// an optional limit), explicit copies in and out, streams that are threads
// (thread_streams) and completions that come from them, and it runs the
// CPU registry's kernels. Everything of the GPU path except the CUDA calls
// themselves (placement on an accelerator, copies at the cuts, completion
// messages, memory given back, kernel errors failing only their step) is
// tested with it on every machine.
//
// Its kernels read copies of their inputs and write outputs that are then
// copied into its memory: the stand-in is for correctness, not for speed.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "devices/accelerator.hpp"
#include "devices/stand_in/thread_streams.hpp"

namespace actorflow {

struct stand_in_options {
  int streams = 1;
  /// Bytes of device memory it may hold (0: no limit); more fails the
  /// launch that asks, as a GPU out of memory does.
  size_t memory_limit = 0;
};

class stand_in_device final : public accelerator {
 public:
  stand_in_device(int index, stand_in_options options = {});
  ~stand_in_device() override;

  const std::string& name() const override { return name_; }
  bool has_kernel(const op_def& def, const std::vector<dtype>& input_types) const override;
  /// Every op's: it runs the CPU's kernels, bfloat16 ones included.
  bool has_bfloat16_kernel(const op_def& def) const override { return has_kernel(def, {}); }
  /// Every update op: it runs the CPU's update on copies, as its kernels do.
  bool has_update_kernel(const op_def& def, dtype value_type) const override;
  std::shared_ptr<gpu::stream_executor> streams() const override { return streams_; }
  void enqueue(int s, accelerator_launch& launch) override;
  void enqueue_snapshot(int s, device_variable& v, variable_state& out) override;
  void enqueue_restore(int s, device_variable& v, const variable_state& in) override;
  accelerator_stats stats() const override;

  /// Copies a host tensor into this device's memory for work on stream s.
  device_value_ptr copy_in(const tensor& host, int s);
  /// Copies a value in this device's memory out to a new host tensor.
  tensor copy_out(const device_value& value);

 private:
  device_value_ptr to_device_memory(const tensor& host, int s);
  // Copies of the launch's inputs, as host tensors for the CPU's kernel.
  std::vector<tensor> host_copies(int s, accelerator_launch& launch);
  // The CPU's kernel or update on copies; the outputs in host memory.
  std::vector<tensor> run_on_host(int s, accelerator_launch& launch, std::vector<tensor> inputs);
  // Copies out to a host tensor, counted or not (a variable's own round trip is not).
  tensor to_host(const gpu::device_tensor& t) const;
  // Writes host tensor `from` into `into`: in place where nobody else holds
  // the block, else into a new one (copy-on-write, as a GPU update does).
  void write_back(const tensor& from, gpu::device_tensor& into, int s);

  std::string name_;
  std::shared_ptr<thread_streams> streams_;
  std::shared_ptr<gpu::caching_allocator> memory_;
  std::atomic<int64_t> bytes_in_{0}, bytes_out_{0}, launches_{0};
};

}  // namespace actorflow
