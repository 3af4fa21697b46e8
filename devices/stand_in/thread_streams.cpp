#include "devices/stand_in/thread_streams.hpp"

#include "core/error.hpp"

namespace actorflow {

namespace {

class counter_fence final : public gpu::fence {
 public:
  counter_fence(const std::atomic<int64_t>& finished, int64_t mark)
      : finished_(finished), mark_(mark) {}
  bool done() override { return finished_.load(std::memory_order_acquire) >= mark_; }

 private:
  const std::atomic<int64_t>& finished_;
  int64_t mark_;
};

}  // namespace

thread_streams::thread_streams(int n) : queues_(static_cast<size_t>(n)) {
  if (n < 1) fail("streams", "at least one stream, not " + std::to_string(n));
  for (auto& q : queues_) q.thread = std::thread([&q] { q.run(); });
}

thread_streams::~thread_streams() {
  for (auto& q : queues_) {
    {
      std::lock_guard<std::mutex> lock(q.mutex);
      q.stop = true;
    }
    q.wake.notify_all();
    q.thread.join();
  }
}

thread_streams::queue& thread_streams::at(int s) {
  if (s < 0 || s >= num_streams())
    fail("streams", "stream " + std::to_string(s) + " of " + std::to_string(num_streams()));
  return queues_[static_cast<size_t>(s)];
}

void thread_streams::launch(int s, std::function<void()> work) {
  at(s).push([work = std::move(work)](std::string& error) {
    if (!error.empty()) return;
    try {
      work();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
}

void thread_streams::when_done(int s, std::function<void(std::string)> done) {
  at(s).push([done = std::move(done)](std::string& error) { done(error); });
}

std::unique_ptr<gpu::fence> thread_streams::make_fence(int s) {
  auto& q = at(s);
  return std::make_unique<counter_fence>(q.finished, q.pushed.load(std::memory_order_acquire));
}

void thread_streams::queue::push(std::function<void(std::string&)> f) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    items.push_back(std::move(f));
    pushed.fetch_add(1, std::memory_order_release);
  }
  wake.notify_one();
}

void thread_streams::queue::run() {
  for (;;) {
    std::function<void(std::string&)> f;
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] { return stop || !items.empty(); });
      if (items.empty()) return;
      f = std::move(items.front());
      items.pop_front();
    }
    f(error);
    f = nullptr;  // what the work held goes before it counts as done
    finished.fetch_add(1, std::memory_order_release);
  }
}

}  // namespace actorflow
