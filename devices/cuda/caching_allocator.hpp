// A caching allocator for memory that streams of asynchronous work use: GPU
// memory (cudaMalloc), pinned host memory (cudaHostAlloc, for staging copies),
// or, in tests, plain host memory. Plain C++: the backend and the stream fences
// come from outside, so every rule here is testable without a GPU.
//
// Blocks come in size classes (round_size). A freed block is not reused until
// the work of every stream that used it has run: deallocate() only queues it;
// the next allocate() (or collect()) records a fence on those streams, and the
// block joins the free bins once the fences are done. One exception makes the
// common case cheap: a block used on one stream only may go straight to the
// next allocation on that same stream, whose work that stream runs after the
// old work (stream order). So the step path never calls the backend once the
// cache holds what a step needs: no cudaMalloc per step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/export.hpp"

namespace actorflow::gpu {

/// Where a caching allocator gets raw memory from.
class ACTORFLOW_API memory_backend {
 public:
  virtual ~memory_backend() = default;
  /// At least `bytes` bytes, aligned to 256; throws actorflow::error when it has none.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  /// "cuda device 0", "pinned host", "host": for errors.
  virtual std::string name() const = 0;
};

/// Plain host memory, 256-byte aligned: the backend of the allocator's tests.
ACTORFLOW_API std::unique_ptr<memory_backend> make_host_backend();

/// A point in one stream's work, done once the stream has run everything
/// enqueued before it (on a GPU: a recorded cudaEvent).
class ACTORFLOW_API fence {
 public:
  virtual ~fence() = default;
  /// Never blocks.
  virtual bool done() = 0;
};

/// Makes a fence at the current end of `stream`'s work. Null: no streams (a
/// freed block is free at once).
using fence_factory = std::function<std::unique_ptr<fence>(int stream)>;

struct ACTORFLOW_API allocator_stats {
  size_t bytes_in_use = 0;   // handed out and not given back
  size_t bytes_pending = 0;  // given back, waiting for their streams' work
  size_t bytes_cached = 0;   // in the free bins
  size_t peak_bytes_in_use = 0;
  int64_t backend_allocations = 0;
  int64_t backend_frees = 0;
  int64_t reuses = 0;  // allocations served from the cache
};

struct ACTORFLOW_API caching_allocator_options {
  /// A block used on one stream only may go at once to the next allocation on
  /// that stream. Right for device memory; wrong for pinned staging buffers,
  /// which the host writes at once, not in stream order.
  bool stream_ordered_reuse = true;
};

class ACTORFLOW_API caching_allocator {
 public:
  caching_allocator(std::unique_ptr<memory_backend> backend, fence_factory make_fence,
                    caching_allocator_options options = {});
  /// Frees every block it still knows to the backend; the streams must be idle.
  ~caching_allocator();
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  /// A block of at least `bytes` for work on `stream`. Throws actorflow::error
  /// when the backend has no memory left even after the cache is released.
  void* allocate(size_t bytes, int stream);
  /// Notes that work on `stream` also uses block p: its reuse waits for that stream too.
  void record_stream(void* p, int stream);
  /// Gives block p back. Safe from any thread, a CUDA stream callback included:
  /// it calls neither the backend nor the fence factory.
  void deallocate(void* p);
  /// Fences the blocks given back since the last call and moves those whose
  /// streams have run their work into the free bins. allocate() calls it.
  void collect();
  /// Returns the free blocks to the backend (allocate() does it before giving up).
  void release_cached();
  allocator_stats stats() const;
  const memory_backend& backend() const { return *backend_; }

  /// The size class of a request: a multiple of 512 bytes, at most a quarter
  /// above the request (four classes per power of two); 512 for 0.
  static size_t round_size(size_t bytes);

 private:
  struct block {
    void* ptr = nullptr;
    size_t size = 0;
    int stream = 0;
    std::vector<int> other_streams;
  };
  struct pending_block {
    block b;
    std::vector<std::unique_ptr<fence>> fences;
  };

  void collect_locked();
  void* take_cached_locked(size_t size, int stream);
  std::vector<block> drain_free_locked();

  std::unique_ptr<memory_backend> backend_;
  fence_factory make_fence_;
  caching_allocator_options options_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, block> in_use_;
  std::vector<block> released_;         // given back, not fenced yet
  std::vector<pending_block> pending_;  // fenced, waiting for their streams
  std::multimap<size_t, block> free_;   // by size class
  allocator_stats stats_;
};

}  // namespace actorflow::gpu
