// The CUDA side of the caching allocator (CUDA builds only): device memory
// (cudaMalloc, never managed memory), pinned host memory for staging copies
// (cudaHostAlloc), and fences made of pooled CUDA events.
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "devices/cuda/caching_allocator.hpp"

namespace actorflow::gpu {

std::unique_ptr<memory_backend> make_device_backend(int ordinal);
std::unique_ptr<memory_backend> make_pinned_backend(int ordinal);

/// Reusable events (timing disabled, the cheap kind), so the step path does
/// not create and destroy them.
class event_pool {
 public:
  explicit event_pool(int ordinal) : ordinal_(ordinal) {}
  ~event_pool();
  cudaEvent_t get();
  void put(cudaEvent_t e);

 private:
  int ordinal_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

/// A device's streams as the fences see them. After close() (the device is
/// going away and has synchronized), fences are done at once.
struct fence_streams {
  int ordinal = 0;
  std::vector<cudaStream_t> streams;
  std::shared_ptr<event_pool> events;
  std::atomic<bool> closed{false};
};

/// Fences that record a pooled event on the stream and query it.
fence_factory make_event_fences(std::shared_ptr<fence_streams> streams);

}  // namespace actorflow::gpu
