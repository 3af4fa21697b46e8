#include "core/large_blocks.hpp"

#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <unordered_map>

namespace actorflow::large_blocks {

namespace {

// Large blocks are few and each is costly to make, so one mutex over all of
// them costs nothing that shows.
struct cache {
  std::mutex mutex;
  std::unordered_map<void*, size_t> size_of;  // every block handed out or kept
  std::deque<void*> free_blocks;              // most recently given back first
  size_t free_bytes = 0;
};

cache& the_cache() {
  static auto* c = new cache;  // never destroyed: tensors may be freed during exit
  return *c;
}

size_t rounded(size_t bytes) { return (bytes + granule - 1) / granule * granule; }

}  // namespace

void* take(size_t bytes) {
  const size_t size = rounded(bytes);
  auto& c = the_cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto it = c.free_blocks.begin(); it != c.free_blocks.end(); ++it) {
      if (c.size_of.at(*it) != size) continue;
      void* block = *it;
      c.free_blocks.erase(it);
      c.free_bytes -= size;
      return block;
    }
  }
  void* block = std::malloc(size);
  if (!block) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.size_of.emplace(block, size);
  return block;
}

void give_back(void* block) {
  auto& c = the_cache();
  std::deque<void*> evicted;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    size_t size = c.size_of.at(block);
    c.free_blocks.push_front(block);
    c.free_bytes += size;
    while (c.free_bytes > max_cached_bytes) {
      void* oldest = c.free_blocks.back();
      c.free_blocks.pop_back();
      c.free_bytes -= c.size_of.at(oldest);
      c.size_of.erase(oldest);
      evicted.push_back(oldest);
    }
  }
  for (void* b : evicted) std::free(b);  // outside the lock: munmap is slow
}

size_t cached_bytes() {
  auto& c = the_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.free_bytes;
}

}  // namespace actorflow::large_blocks
