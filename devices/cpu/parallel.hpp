// Data-parallel loops for CPU kernels.
//
// Kernels call parallel_for; below the grain it runs inline (cheap ops stay on
// the calling thread), above it TBB splits the range across the arena the
// kernel runs in (the CPU device's arena when the node handed it off).
#pragma once
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace actorflow {

/// Elements per task below which element-wise work is not split.
inline constexpr int64_t parallel_grain = 32 * 1024;

/// The largest grain within a fine_grain_scope.
inline constexpr int64_t fine_grain = 4 * 1024;

namespace detail {
inline thread_local int64_t grain_cap = 0;  // 0: none
}

/// While one lives, parallel_for on this thread splits work from fine_grain
/// items up. A loop's kernels run one after another on its actor's thread;
/// with the usual grain the pool's threads have nothing to do between the
/// loop's products and fall asleep, and each product then waits for one to
/// wake (a 32x256x1024 product: 116 us instead of 70). Small element-wise
/// kernels handed to them keep them awake (the LSTM LM: 5% more words/s in
/// alternating runs of actorflow-train).
class fine_grain_scope {
 public:
  fine_grain_scope() : saved_(std::exchange(detail::grain_cap, fine_grain)) {}
  ~fine_grain_scope() { detail::grain_cap = saved_; }
  fine_grain_scope(const fine_grain_scope&) = delete;
  fine_grain_scope& operator=(const fine_grain_scope&) = delete;

 private:
  int64_t saved_;
};

/// Calls fn(begin, end) over [0, n) in chunks of at least `grain` items.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (detail::grain_cap > 0) grain = std::min(grain, detail::grain_cap);
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
