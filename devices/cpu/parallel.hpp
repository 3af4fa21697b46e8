// Data-parallel loops for CPU kernels.
//
// Kernels call parallel_for; below the grain it runs inline (cheap ops stay on
// the calling thread), above it TBB splits the range across the arena the
// kernel runs in (the CPU device's arena when the node handed it off).
#pragma once
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cstdint>

namespace actorflow {

/// Elements per task below which element-wise work is not split.
inline constexpr int64_t parallel_grain = 32 * 1024;

/// Calls fn(begin, end) over [0, n) in chunks of at least `grain` items.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= grain) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { fn(r.begin(), r.end()); });
}

template <class F>
void parallel_for(int64_t n, F&& fn) {
  parallel_for(n, parallel_grain, std::forward<F>(fn));
}

}  // namespace actorflow
