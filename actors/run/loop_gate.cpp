#include "actors/run/loop_gate.hpp"

#include <algorithm>
#include <limits>

namespace actorflow {

loop_gate::loop_gate(size_t num_vars, int64_t parallel_iterations)
    : num_vars_(num_vars),
      parallel_iterations_(static_cast<uint64_t>(std::max<int64_t>(1, parallel_iterations))) {}

loop_gate::frame_state& loop_gate::state_of(uint64_t step, uint64_t frame) {
  auto [it, fresh] = frames_.try_emplace({step, frame});
  if (fresh) {
    it->second.reached.assign(num_vars_, 0);
    it->second.finished.assign(num_vars_, false);
  }
  return it->second;
}

uint64_t loop_gate::slowest(const frame_state& f) const {
  uint64_t low = std::numeric_limits<uint64_t>::max();
  for (size_t v = 0; v < num_vars_; ++v)
    if (!f.finished[v]) low = std::min(low, f.reached[v]);
  return low;
}

std::vector<std::function<void()>> loop_gate::release(frame_state& f) {
  std::vector<std::function<void()>> ready;
  for (bool moved = true; moved;) {
    moved = false;
    uint64_t low = slowest(f);
    for (auto it = f.waiting.begin(); it != f.waiting.end();) {
      if (low == std::numeric_limits<uint64_t>::max() ||
          it->iteration < low + parallel_iterations_) {
        f.reached[it->var] = it->iteration;
        ready.push_back(std::move(it->move));
        it = f.waiting.erase(it);
        moved = true;
      } else {
        ++it;
      }
    }
  }
  return ready;
}

bool loop_gate::must_wait(frame_state& f, size_t var, uint64_t iteration) const {
  // A variable that waits to move has left its iteration: it counts where
  // it waits to go, or with parallel_iterations 1 the first to finish an
  // iteration would wait for the others, which would wait for it.
  f.reached[var] = iteration;
  return iteration >= slowest(f) + parallel_iterations_;
}

void loop_gate::finish(uint64_t step, uint64_t frame, size_t var) {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // A variable may leave before another one ever moved (a failure in
    // iteration 0): remember it, or the others would wait for it.
    state_of(step, frame);
    auto it = frames_.find({step, frame});
    auto& f = it->second;
    f.finished[var] = true;
    ready = release(f);
    if (std::all_of(f.finished.begin(), f.finished.end(), [](bool b) { return b; }) &&
        f.waiting.empty())
      frames_.erase(it);
  }
  for (auto& m : ready) m();
}

void loop_gate::drop(uint64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = frames_.begin(); it != frames_.end();)
    it = it->first.first == step ? frames_.erase(it) : std::next(it);
}

size_t loop_gate::frames_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return frames_.size();
}

}  // namespace actorflow
