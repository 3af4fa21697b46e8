// Small timing helpers shared by the benchmarks.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace actorflow::bench {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

/// Median over `repeats` of the seconds one call of fn takes, after warm-up calls.
inline double median_seconds(int repeats, int warmup, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    double t0 = now_seconds();
    fn();
    times.push_back(now_seconds() - t0);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace actorflow::bench
