#include "perf/serve_load.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace actorflow::bench {

namespace {

using clock_type = std::chrono::steady_clock;

double us_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Each thread's own tally, merged at the end.
struct tally {
  std::vector<double> latencies_us;
  int64_t failures = 0;
};

load_result merge(std::vector<tally>& tallies, double seconds) {
  load_result r;
  r.seconds = seconds;
  for (auto& t : tallies) {
    r.latencies_us.insert(r.latencies_us.end(), t.latencies_us.begin(), t.latencies_us.end());
    r.failures += t.failures;
  }
  return r;
}

bool send_counted(const send_fn& send) {
  try {
    return send();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

double load_result::quantile_us(double q) const {
  if (latencies_us.empty()) return 0;
  auto sorted = latencies_us;
  std::sort(sorted.begin(), sorted.end());
  auto at = static_cast<size_t>(std::clamp(q, 0.0, 1.0) * double(sorted.size() - 1) + 0.5);
  return sorted[at];
}

load_result closed_loop(const client_factory& make, int concurrency, double seconds) {
  std::vector<tally> tallies(static_cast<size_t>(concurrency));
  std::vector<send_fn> clients;
  for (int i = 0; i < concurrency; ++i) clients.push_back(make());
  std::atomic<bool> go{false};
  auto start = clock_type::now();
  auto end = start + std::chrono::duration_cast<clock_type::duration>(
                         std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int i = 0; i < concurrency; ++i)
    threads.emplace_back([&, i] {
      while (!go) std::this_thread::yield();
      auto& mine = tallies[static_cast<size_t>(i)];
      while (clock_type::now() < end) {
        auto t0 = clock_type::now();
        if (send_counted(clients[static_cast<size_t>(i)]))
          mine.latencies_us.push_back(us_between(t0, clock_type::now()));
        else
          ++mine.failures;
      }
    });
  start = clock_type::now();
  end = start +
        std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  go = true;
  for (auto& t : threads) t.join();
  return merge(tallies, std::chrono::duration<double>(clock_type::now() - start).count());
}

load_result open_loop(const client_factory& make, double rate, double seconds, int workers) {
  std::vector<tally> tallies(static_cast<size_t>(workers));
  std::vector<send_fn> clients;
  for (int i = 0; i < workers; ++i) clients.push_back(make());
  auto total = static_cast<int64_t>(std::llround(rate * seconds));
  auto interval = std::chrono::duration<double>(1.0 / rate);
  auto start = clock_type::now() + std::chrono::milliseconds(50);
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i)
    threads.emplace_back([&, i] {
      auto& mine = tallies[static_cast<size_t>(i)];
      for (int64_t k = i; k < total; k += workers) {
        auto due = start + std::chrono::duration_cast<clock_type::duration>(interval * double(k));
        std::this_thread::sleep_until(due);
        if (send_counted(clients[static_cast<size_t>(i)]))
          mine.latencies_us.push_back(us_between(due, clock_type::now()));
        else
          ++mine.failures;
      }
    });
  for (auto& t : threads) t.join();
  return merge(tallies, std::chrono::duration<double>(clock_type::now() - start).count());
}

load_result open_loop_async(const async_send_fn& send, double rate, double seconds, double drain) {
  auto total = static_cast<int64_t>(std::llround(rate * seconds));
  auto interval = std::chrono::duration<double>(1.0 / rate);
  // Shared with the answers' callbacks, which may outlive a drain that timed out.
  struct shared_tally {
    std::mutex mutex;
    std::condition_variable all_answered;
    tally answers;
    int64_t answered = 0;
  };
  auto shared = std::make_shared<shared_tally>();
  auto start = clock_type::now() + std::chrono::milliseconds(50);
  for (int64_t k = 0; k < total; ++k) {
    auto due = start + std::chrono::duration_cast<clock_type::duration>(interval * double(k));
    std::this_thread::sleep_until(due);
    auto record = [shared, due, total](bool ok) {
      auto now = clock_type::now();
      std::lock_guard lock(shared->mutex);
      if (ok)
        shared->answers.latencies_us.push_back(us_between(due, now));
      else
        ++shared->answers.failures;
      if (++shared->answered == total) shared->all_answered.notify_all();
    };
    try {
      send(record);
    } catch (const std::exception&) {
      record(false);
    }
  }
  std::unique_lock lock(shared->mutex);
  shared->all_answered.wait_for(lock, std::chrono::duration<double>(drain),
                                [&] { return shared->answered == total; });
  load_result r;
  r.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  r.latencies_us = shared->answers.latencies_us;
  r.failures = shared->answers.failures + (total - shared->answered);
  return r;
}

}  // namespace actorflow::bench
