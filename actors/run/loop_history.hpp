// The forward values a loop's gradient reads back (core/gradients.cpp): a
// history_push node in the forward loop saves its value per iteration, and
// a history_read node in the backward loop takes the value of the iteration
// its index inputs name. One store per saved tensor, in the process that
// runs both (they sit on the forward node's device).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "core/tensor.hpp"
#include "devices/accelerator.hpp"

namespace actorflow {

/// A saved value: a host tensor, or (a loop on an accelerator) the value in
/// its memory; neither for an untaken branch's.
struct saved_value {
  tensor value;
  device_value_ptr on_device;
  bool valid() const { return value.valid() || on_device != nullptr; }
};

class loop_history {
 public:
  /// The iterations of the frames a value lives in, outermost first.
  using path = std::vector<uint64_t>;
  using reader = std::function<void(saved_value)>;

  /// Saves the value of (step, at); readers already waiting for it get it.
  void put(uint64_t step, const path& at, saved_value value);
  /// Calls `read` with the value of (step, at) now, or once it is saved; with
  /// `pop`, the store lets go of the value after that (the one backward
  /// loop that reads it does so once per iteration).
  void take(uint64_t step, const path& at, bool pop, reader read);
  /// Frees what a finished or failed step left.
  void forget(uint64_t step);
  /// Values and waiting readers held (tests check that none is left behind).
  size_t entries() const;
  /// The same, over every store of this process.
  static int64_t entries_held_in_process();

  loop_history() = default;
  loop_history(const loop_history&) = delete;
  loop_history& operator=(const loop_history&) = delete;
  ~loop_history();

 private:
  struct waiting {
    bool pop;
    reader read;
  };
  struct entry {
    saved_value value;
    bool saved = false;
    std::vector<waiting> readers;
  };
  entry& entry_of(const std::pair<uint64_t, path>& key);
  void erase(const std::pair<uint64_t, path>& key);
  mutable std::mutex mutex_;
  std::map<std::pair<uint64_t, path>, entry> entries_;
  // Steps already forgotten: a late put for one of them (a value of the
  // predicate's last iteration, which no gradient reads) is dropped.
  std::deque<uint64_t> forgotten_;
};

}  // namespace actorflow
