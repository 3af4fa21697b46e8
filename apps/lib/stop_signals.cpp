#include "apps/lib/stop_signals.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

namespace actorflow::apps {

namespace {

enum class phase { starting, running, stopping };

// Shared with the waiting thread, which is detached (it sits in sigwait
// until the process ends), so the state lives as long as the process.
struct signal_state {
  std::string who;
  std::mutex mutex;
  std::condition_variable changed;
  phase now = phase::starting;
  int signal = 0;
  std::chrono::steady_clock::time_point stop_deadline =
      std::chrono::steady_clock::time_point::max();
};

signal_state* state = nullptr;

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// An ordinary thread (sigwait, not a signal handler): it may print.
void end_now(const std::string& why, int status) {
  std::cerr << state->who << ": " << why << std::endl;
  std::_Exit(status);
}

void wait_for_signals() {
  auto set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    std::unique_lock<std::mutex> lock(state->mutex);
    switch (state->now) {
      case phase::starting:
        end_now("stopping during start-up (signal " + std::to_string(sig) + ")", 128 + sig);
      case phase::running:
        state->now = phase::stopping;
        state->signal = sig;
        state->changed.notify_all();
        break;
      case phase::stopping:
        end_now("a second signal (" + std::to_string(sig) + "): stopping now", 128 + sig);
    }
  }
}

// Ends the process if the orderly stop outlasts its deadline.
void watch_stop_deadline() {
  std::unique_lock<std::mutex> lock(state->mutex);
  while (std::chrono::steady_clock::now() < state->stop_deadline)
    state->changed.wait_until(lock, state->stop_deadline);
  end_now("the stop did not finish in time; exiting", 1);
}

}  // namespace

stop_signals::stop_signals(std::string who) {
  auto set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (state == nullptr) {
    state = new signal_state;  // lives as long as the process
    state->who = std::move(who);
    std::thread(wait_for_signals).detach();
  }
}

void stop_signals::running() {
  std::lock_guard<std::mutex> lock(state->mutex);
  if (state->now == phase::starting) state->now = phase::running;
}

int stop_signals::wait_for_stop(std::chrono::milliseconds deadline) {
  std::unique_lock<std::mutex> lock(state->mutex);
  state->changed.wait(lock, [] { return state->now == phase::stopping; });
  state->stop_deadline = std::chrono::steady_clock::now() + deadline;
  std::thread(watch_stop_deadline).detach();
  return state->signal;
}

}  // namespace actorflow::apps
