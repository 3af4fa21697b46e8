// SIGINT and SIGTERM for a long-running process, heard in every phase. A
// thread of their own waits for them, started before any other thread (the
// others inherit the blocked mask, so only this one receives them):
//  - while starting, a signal ends the process at once (128 + signal);
//  - while running, it asks for an orderly stop (wait() returns), which
//    must finish within its deadline, or the process ends with status 1;
//  - a second signal during the stop ends the process at once.
#pragma once
#include <chrono>
#include <string>

namespace actorflow::apps {

class stop_signals {
 public:
  /// Blocks the signals in the calling thread (and so in every thread it
  /// starts later) and starts the waiting thread. `who` prefixes messages.
  explicit stop_signals(std::string who);
  stop_signals(const stop_signals&) = delete;
  stop_signals& operator=(const stop_signals&) = delete;

  /// From now on a signal asks for an orderly stop.
  void running();
  /// Waits until a signal asks for a stop; returns the signal. The orderly
  /// stop then has `deadline` to finish (the caller returns from main).
  int wait_for_stop(std::chrono::milliseconds deadline);
};

}  // namespace actorflow::apps
