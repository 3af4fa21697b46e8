// The bound on iterations in flight of one while loop (parallel_iterations),
// shared by the next_iteration actors of its loop variables in one process.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

namespace actorflow {

/// Each loop variable of a loop frame moves from one iteration to the next
/// at its own pace (an actor per node: iteration i+1 of one node runs while
/// iteration i of the next one does). The gate keeps every variable less
/// than `parallel_iterations` iterations ahead of the slowest one still in
/// the loop, so a cheap counter cannot run far ahead of a slow body and fill
/// the mailboxes; a move that would break the bound waits in the gate until
/// the slowest variable catches up.
class loop_gate {
 public:
  loop_gate(size_t num_vars, int64_t parallel_iterations);

  /// Variable `var` of frame (step, frame) would move into `iteration`.
  /// Returns true if it may now; else the gate keeps the move that
  /// `make_move()` returns and calls it once it may (from the thread of the
  /// call that lets it). Only a move that waits is made: most never do.
  template <class MakeMove>
  bool admit(uint64_t step, uint64_t frame, size_t var, uint64_t iteration, MakeMove&& make_move) {
    std::vector<std::function<void()>> ready;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& f = state_of(step, frame);
      if (must_wait(f, var, iteration)) {
        f.waiting.push_back({var, iteration, make_move()});
        return false;
      }
      ready = release(f);
    }
    for (auto& m : ready) m();
    return true;
  }
  /// Variable `var` left the loop (its last iteration ended, or it failed):
  /// it no longer holds the others back.
  void finish(uint64_t step, uint64_t frame, size_t var);
  /// Forgets every frame of `step` (a failed step, dropped).
  void drop(uint64_t step);
  /// Frames it holds state for (tests check that none is left behind).
  size_t frames_held() const;

 private:
  struct waiting_move {
    size_t var;
    uint64_t iteration;
    std::function<void()> move;
  };
  struct frame_state {
    std::vector<uint64_t> reached;  // the iteration each variable is in, or waits to move into
    std::vector<bool> finished;
    std::vector<waiting_move> waiting;
  };
  frame_state& state_of(uint64_t step, uint64_t frame);
  // Notes that `var` moves into `iteration`; whether that breaks the bound.
  bool must_wait(frame_state& f, size_t var, uint64_t iteration) const;
  uint64_t slowest(const frame_state& f) const;
  // Moves the waiting ones that the bound now lets through; returns them to call.
  std::vector<std::function<void()>> release(frame_state& f);

  size_t num_vars_;
  uint64_t parallel_iterations_;
  mutable std::mutex mutex_;
  std::map<std::pair<uint64_t, uint64_t>, frame_state> frames_;
};

}  // namespace actorflow
