#include "actors/run/loop_history.hpp"

#include <algorithm>
#include <atomic>

namespace actorflow {

namespace {
std::atomic<int64_t> entries_in_process{0};
}

int64_t loop_history::entries_held_in_process() { return entries_in_process.load(); }

loop_history::~loop_history() { entries_in_process -= static_cast<int64_t>(entries_.size()); }

// The entry of (step, at), counted in entries_in_process when it is new.
loop_history::entry& loop_history::entry_of(const std::pair<uint64_t, path>& key) {
  auto [it, fresh] = entries_.try_emplace(key);
  if (fresh) ++entries_in_process;
  return it->second;
}

void loop_history::erase(const std::pair<uint64_t, path>& key) {
  entries_in_process -= static_cast<int64_t>(entries_.erase(key));
}

void loop_history::put(uint64_t step, const path& at, saved_value value) {
  std::vector<waiting> readers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::find(forgotten_.begin(), forgotten_.end(), step) != forgotten_.end()) return;
    auto key = std::make_pair(step, at);
    auto& e = entry_of(key);
    readers = std::move(e.readers);
    e.readers.clear();
    bool popped = std::any_of(readers.begin(), readers.end(), [](auto& r) { return r.pop; });
    if (popped) {
      erase(key);
    } else {
      e.value = value;
      e.saved = true;
    }
  }
  for (auto& r : readers) r.read(value);
}

void loop_history::take(uint64_t step, const path& at, bool pop, reader read) {
  saved_value value;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto key = std::make_pair(step, at);
    auto& e = entry_of(key);
    if (!e.saved) {
      e.readers.push_back({pop, std::move(read)});
      return;
    }
    value = e.value;
    if (pop) erase(key);
  }
  read(std::move(value));
}

void loop_history::forget(uint64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Late puts follow the end of their step within moments.
  forgotten_.push_back(step);
  if (forgotten_.size() > 64) forgotten_.pop_front();
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.first != step) {
      ++it;
      continue;
    }
    --entries_in_process;
    it = entries_.erase(it);
  }
}

size_t loop_history::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace actorflow
