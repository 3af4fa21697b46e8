#include "devices/cuda/cuda_memory.hpp"

#include "devices/cuda/cuda_check.hpp"

namespace actorflow::gpu {

namespace {

class device_backend final : public memory_backend {
 public:
  explicit device_backend(int ordinal) : ordinal_(ordinal) {}
  void* allocate(size_t bytes) override {
    check_cuda(cudaSetDevice(ordinal_), "gpu memory", "cudaSetDevice");
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky: clear it
      fail(error_code::resource_exhausted, "gpu memory",
           name() + ": out of memory allocating " + std::to_string(bytes) + " bytes (" +
               cuda_error_text(e, "cudaMalloc") + ")");
    }
    return p;
  }
  void deallocate(void* p, size_t) noexcept override {
    cudaSetDevice(ordinal_);
    cudaFree(p);
  }
  std::string name() const override { return "cuda device " + std::to_string(ordinal_); }

 private:
  int ordinal_;
};

class pinned_backend final : public memory_backend {
 public:
  explicit pinned_backend(int ordinal) : ordinal_(ordinal) {}
  void* allocate(size_t bytes) override {
    check_cuda(cudaSetDevice(ordinal_), "gpu memory", "cudaSetDevice");
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail(error_code::resource_exhausted, "gpu memory",
           name() + ": out of memory allocating " + std::to_string(bytes) + " bytes (" +
               cuda_error_text(e, "cudaHostAlloc") + ")");
    }
    return p;
  }
  void deallocate(void* p, size_t) noexcept override { cudaFreeHost(p); }
  std::string name() const override {
    return "pinned host memory for cuda device " + std::to_string(ordinal_);
  }

 private:
  int ordinal_;
};

class event_fence final : public fence {
 public:
  event_fence(std::shared_ptr<fence_streams> streams, cudaEvent_t event)
      : streams_(std::move(streams)), event_(event) {}
  ~event_fence() override {
    if (!streams_->closed) streams_->events->put(event_);
  }
  bool done() override {
    if (streams_->closed) return true;
    cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: clear it so kernel checks do not see it
      return false;
    }
    // Done, or the device failed: either way no more work will touch the block.
    return true;
  }

 private:
  std::shared_ptr<fence_streams> streams_;
  cudaEvent_t event_;
};

class done_fence final : public fence {
 public:
  bool done() override { return true; }
};

}  // namespace

std::unique_ptr<memory_backend> make_device_backend(int ordinal) {
  return std::make_unique<device_backend>(ordinal);
}

std::unique_ptr<memory_backend> make_pinned_backend(int ordinal) {
  return std::make_unique<pinned_backend>(ordinal);
}

event_pool::~event_pool() {
  cudaSetDevice(ordinal_);
  for (auto e : free_) cudaEventDestroy(e);
}

cudaEvent_t event_pool::get() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "gpu device",
             "cudaEventCreateWithFlags");
  return e;
}

void event_pool::put(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(e);
}

fence_factory make_event_fences(std::shared_ptr<fence_streams> streams) {
  return [streams](int s) -> std::unique_ptr<fence> {
    if (streams->closed) return std::make_unique<done_fence>();
    cudaEvent_t e = streams->events->get();
    check_cuda(cudaEventRecord(e, streams->streams.at(static_cast<size_t>(s))), "gpu memory",
               "cudaEventRecord");
    return std::make_unique<event_fence>(streams, e);
  };
}

}  // namespace actorflow::gpu
