#include "devices/cuda/caching_allocator.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>

#include "core/error.hpp"

namespace actorflow::gpu {

namespace {

constexpr size_t min_block = 512;
constexpr size_t alignment = 256;

class host_backend final : public memory_backend {
 public:
  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    if (!p)
      fail(error_code::resource_exhausted, "gpu memory",
           "host: out of memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void deallocate(void* p, size_t) noexcept override { std::free(p); }
  std::string name() const override { return "host"; }
};

}  // namespace

std::unique_ptr<memory_backend> make_host_backend() { return std::make_unique<host_backend>(); }

size_t caching_allocator::round_size(size_t bytes) {
  if (bytes <= min_block) return min_block;
  // Four classes per power of two: the step is a quarter of the largest power
  // of two not above the request (but never below 512).
  const size_t top = std::bit_floor(bytes);
  const size_t step = std::max(min_block, top / 4);
  return (bytes + step - 1) / step * step;
}

caching_allocator::caching_allocator(std::unique_ptr<memory_backend> backend,
                                     fence_factory make_fence, caching_allocator_options options)
    : backend_(std::move(backend)), make_fence_(std::move(make_fence)), options_(options) {}

caching_allocator::~caching_allocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& b : released_) backend_->deallocate(b.ptr, b.size);
  for (auto& p : pending_) backend_->deallocate(p.b.ptr, p.b.size);
  for (auto& [size, b] : free_) backend_->deallocate(b.ptr, b.size);
  for (auto& [ptr, b] : in_use_) backend_->deallocate(b.ptr, b.size);
}

void caching_allocator::collect_locked() {
  while (!released_.empty()) {
    // Fenced before it moves: if recording a fence throws, the block stays queued.
    block& b = released_.back();
    std::vector<std::unique_ptr<fence>> fences;
    if (make_fence_) {
      fences.push_back(make_fence_(b.stream));
      for (int s : b.other_streams) fences.push_back(make_fence_(s));
    }
    pending_.push_back({std::move(b), std::move(fences)});
    released_.pop_back();
  }
  // Blocks whose every fence is done become free; the rest keep waiting.
  auto still_waiting = std::partition(pending_.begin(), pending_.end(), [](pending_block& p) {
    return !std::all_of(p.fences.begin(), p.fences.end(),
                        [](const std::unique_ptr<fence>& f) { return f->done(); });
  });
  for (auto it = still_waiting; it != pending_.end(); ++it) {
    stats_.bytes_pending -= it->b.size;
    stats_.bytes_cached += it->b.size;
    it->b.other_streams.clear();
    free_.emplace(it->b.size, std::move(it->b));
  }
  pending_.erase(still_waiting, pending_.end());
}

void* caching_allocator::take_cached_locked(size_t size, int stream) {
  auto it = free_.find(size);
  if (it != free_.end()) {
    block b = std::move(it->second);
    free_.erase(it);
    stats_.bytes_cached -= size;
    b.stream = stream;
    void* p = b.ptr;
    in_use_.emplace(p, std::move(b));
    return p;
  }
  if (!options_.stream_ordered_reuse) return nullptr;
  // A block still waiting for its stream, used on that stream only: work on
  // the same stream runs after the work that used it.
  for (auto pit = pending_.begin(); pit != pending_.end(); ++pit) {
    if (pit->b.size != size || pit->b.stream != stream || !pit->b.other_streams.empty()) continue;
    block b = std::move(pit->b);
    pending_.erase(pit);
    stats_.bytes_pending -= size;
    void* p = b.ptr;
    in_use_.emplace(p, std::move(b));
    return p;
  }
  return nullptr;
}

std::vector<caching_allocator::block> caching_allocator::drain_free_locked() {
  std::vector<block> out;
  for (auto& [size, b] : free_) out.push_back(std::move(b));
  free_.clear();
  stats_.bytes_cached = 0;
  return out;
}

void* caching_allocator::allocate(size_t bytes, int stream) {
  const size_t size = round_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    collect_locked();
    if (void* p = take_cached_locked(size, stream)) {
      stats_.reuses += 1;
      stats_.bytes_in_use += size;
      stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
      return p;
    }
  }
  // The backend is called without the lock: cudaMalloc and cudaFree may wait
  // for the device, whose stream callbacks may be waiting in deallocate().
  void* p = nullptr;
  try {
    p = backend_->allocate(size);
  } catch (const error&) {
    release_cached();
    try {
      p = backend_->allocate(size);
    } catch (const error& e) {
      auto s = stats();
      fail(error_code::resource_exhausted, "gpu memory",
           std::string(e.what()) + " (" + std::to_string(s.bytes_in_use) + " bytes in use, " +
               std::to_string(s.bytes_pending) + " waiting for their streams)");
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_.emplace(p, block{p, size, stream, {}});
  stats_.backend_allocations += 1;
  stats_.bytes_in_use += size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return p;
}

void caching_allocator::record_stream(void* p, int stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(p);
  if (it == in_use_.end())
    fail(error_code::internal, "gpu memory", "record_stream of a block that is not in use");
  block& b = it->second;
  if (stream != b.stream &&
      std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end())
    b.other_streams.push_back(stream);
}

void caching_allocator::deallocate(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(p);
  // Never throws: it runs in deleters and callbacks. A foreign pointer is a bug
  // that must not turn into a double free, so it is left alone.
  if (it == in_use_.end()) return;
  stats_.bytes_in_use -= it->second.size;
  stats_.bytes_pending += it->second.size;
  released_.push_back(std::move(it->second));
  in_use_.erase(it);
}

void caching_allocator::collect() {
  std::lock_guard<std::mutex> lock(mutex_);
  collect_locked();
}

void caching_allocator::release_cached() {
  std::vector<block> blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    collect_locked();
    blocks = drain_free_locked();
    stats_.backend_frees += static_cast<int64_t>(blocks.size());
  }
  for (auto& b : blocks) backend_->deallocate(b.ptr, b.size);
}

allocator_stats caching_allocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace actorflow::gpu
