#include "actors/trace/step_trace.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <unordered_map>
#include <utility>

namespace actorflow {

namespace detail {
std::atomic<int64_t> traced_steps{0};
}

namespace {

struct trace_key_hash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
    return std::hash<uint64_t>()(k.first * 0x9e3779b97f4a7c15ULL ^ k.second);
  }
};

// The traced steps of the process. Looked up only while one is in flight.
struct trace_registry {
  std::atomic<int64_t>& active = detail::traced_steps;
  std::mutex mutex;
  struct entry {
    step_trace_ptr trace;
    int64_t begun_ns = 0;
  };
  std::unordered_map<std::pair<uint64_t, uint64_t>, entry, trace_key_hash> steps;
};

trace_registry& registry() {
  static trace_registry* r = new trace_registry;  // never destroyed: pool threads may outlive main
  return *r;
}

}  // namespace

int64_t trace_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t trace_thread_id() {
  thread_local uint64_t id = static_cast<uint64_t>(::syscall(SYS_gettid));
  return id;
}

void step_trace::add(node_trace&& t) {
  std::lock_guard<std::mutex> lock(mutex_);
  nodes_.push_back(std::move(t));
}

std::vector<node_trace> step_trace::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(nodes_, {});
}

void begin_step_trace(uint64_t executable, uint64_t step) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto fresh = trace_registry::entry{std::make_shared<step_trace>(), trace_now_ns()};
  if (r.steps.emplace(std::pair{executable, step}, std::move(fresh)).second)
    r.active.fetch_add(1, std::memory_order_relaxed);
}

std::vector<node_trace> end_step_trace(uint64_t executable, uint64_t step) {
  auto& r = registry();
  step_trace_ptr trace;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.steps.find({executable, step});
    if (it == r.steps.end()) return {};
    trace = std::move(it->second.trace);
    r.steps.erase(it);
    r.active.fetch_sub(1, std::memory_order_relaxed);
  }
  return trace->take();
}

step_trace_ptr find_traced_step(uint64_t executable, uint64_t step) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.steps.find({executable, step});
  return it == r.steps.end() ? nullptr : it->second.trace;
}

void forget_stale_step_traces() {
  auto& r = registry();
  const int64_t cutoff = trace_now_ns() - 60'000'000'000;
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto forgotten =
      std::erase_if(r.steps, [&](const auto& e) { return e.second.begun_ns < cutoff; });
  r.active.fetch_sub(static_cast<int64_t>(forgotten), std::memory_order_relaxed);
}

int64_t clock_offset_ns(int64_t sent, int64_t received, int64_t answered, int64_t heard) {
  return ((received - sent) + (answered - heard)) / 2;
}

}  // namespace actorflow
