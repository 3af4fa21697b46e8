// Streams of asynchronous work without a GPU: each stream is a thread that
// runs its work in order. The stand-in accelerator drives its device actor
// with them, and tests use them to drive the device actor's protocol.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "devices/cuda/caching_allocator.hpp"
#include "devices/cuda/gpu_device_actor.hpp"

namespace actorflow {

/// when_done queues a marker behind the work. A throwing work item fails its
/// stream for good, as a fault does a CUDA stream; work that must fail only
/// itself catches its own errors.
class thread_streams final : public gpu::stream_executor {
 public:
  explicit thread_streams(int n);
  /// Runs what is queued, then joins the threads.
  ~thread_streams() override;
  thread_streams(const thread_streams&) = delete;
  thread_streams& operator=(const thread_streams&) = delete;

  int num_streams() const override { return static_cast<int>(queues_.size()); }
  void launch(int s, std::function<void()> work) override;
  void when_done(int s, std::function<void(std::string error)> done) override;
  /// A fence at the current end of stream s's work (for a caching allocator).
  std::unique_ptr<gpu::fence> make_fence(int s);

 private:
  struct queue {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::function<void(std::string&)>> items;
    bool stop = false;
    std::string error;  // sticky
    std::atomic<int64_t> pushed{0}, finished{0};
    std::thread thread;
    void push(std::function<void(std::string&)> f);
    void run();
  };
  queue& at(int s);
  std::deque<queue> queues_;
};

}  // namespace actorflow
