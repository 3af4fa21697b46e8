// Cancelling the requests of a failed or aborted step at a resource actor
// that holds requests (a queue, an accumulator; op_def::may_wait).
#pragma once
#include <algorithm>
#include <deque>
#include <string>
#include <unordered_set>

#include "actors/run/messages.hpp"

namespace actorflow {

/// The steps a resource actor was told to cancel (cancel_atom), with why. A
/// cancel can overtake the request it is meant for: a dequeue of a failed step
/// may still be on its way. Such a late request is refused rather than served,
/// so it never takes an element for a step that nobody waits on any more.
class cancelled_steps {
 public:
  void add(const step_key& key, const std::string& why) {
    if (key.executable == 0 || find(key)) return;
    recent_.push_back({key, why});
    if (recent_.size() > capacity) recent_.pop_front();
  }
  /// Why the step of `key` was cancelled; nullptr if it was not.
  const std::string* find(const step_key& key) const {
    if (key.executable == 0) return nullptr;
    auto it =
        std::find_if(recent_.begin(), recent_.end(), [&](const entry& e) { return e.key == key; });
    return it == recent_.end() ? nullptr : &it->why;
  }

 private:
  struct entry {
    step_key key;
    std::string why;
  };
  // A late request follows its cancel within moments; the bound only keeps
  // a long run's memory flat.
  static constexpr size_t capacity = 1024;
  std::deque<entry> recent_;
};

/// The steps a client aborted at a step coordinator, so that their late
/// messages are dropped rather than make a state that never finishes. Late
/// messages arrive within moments of the abort; only the most recent aborts
/// are kept, so that a long run with many failed steps keeps its memory flat.
class aborted_steps {
 public:
  void add(uint64_t step) {
    if (!ids_.insert(step).second) return;
    order_.push_back(step);
    if (order_.size() > capacity) {
      ids_.erase(order_.front());
      order_.pop_front();
    }
  }
  bool contains(uint64_t step) const { return ids_.count(step) > 0; }
  size_t size() const { return order_.size(); }
  static constexpr size_t capacity = 4096;

 private:
  std::unordered_set<uint64_t> ids_;
  std::deque<uint64_t> order_;
};

inline std::string cancelled_text(const std::string& why) { return "cancelled: " + why; }

/// Fails the waiting requests of step `key` (entries with key, who and
/// promise), oldest first, and drops them from `waiting`.
template <class Waiting>
void cancel_waiting(std::deque<Waiting>& waiting, const step_key& key, const std::string& why) {
  for (auto& w : waiting)
    if (w.key == key)
      w.promise.deliver(update_result::failure(w.who + cancelled_text(why), error_code::cancelled));
  std::erase_if(waiting, [&](const Waiting& w) { return w.key == key; });
}

}  // namespace actorflow
