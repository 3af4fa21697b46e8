// Recycling of the blocks behind large tensors.
//
// glibc serves blocks above 32 MiB (the largest mmap threshold it accepts)
// with a fresh mmap and unmaps them on free, so a step that makes the same
// large tensor every time (a 64 MiB tensor received from another task, a big
// activation) pays a page fault and a page clear for every 4 KiB of it, every
// step: on this machine that doubled the time to receive 64 MiB. Blocks given
// back here are kept for the next request of the same rounded size instead.
#pragma once
#include <cstddef>

namespace actorflow::large_blocks {

/// Requests from this size up are served here; smaller ones stay with malloc.
constexpr size_t threshold = size_t{32} << 20;
/// Sizes are rounded up to this, so that nearly equal requests share blocks.
constexpr size_t granule = size_t{2} << 20;
/// At most this many bytes of free blocks are kept; the oldest go back first.
constexpr size_t max_cached_bytes = size_t{1} << 30;

/// A block of at least `bytes` (>= threshold), 16-byte aligned; throws
/// std::bad_alloc when memory is exhausted.
void* take(size_t bytes);
/// Gives back a block from take(); it is kept for reuse or freed.
void give_back(void* block);
/// Bytes held in free blocks now (for tests and diagnostics).
size_t cached_bytes();

}  // namespace actorflow::large_blocks
