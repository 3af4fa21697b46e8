// What every cluster trainer of actorflow-train shares (the image models'
// cluster_training.cpp and the language model's lm_cluster_training.cpp):
// steps that ride out a lost task, the chief's synchronous aggregation loop,
// and the chief's requests to the ps tasks to save their shards.
#pragma once
#include <atomic>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "actors/cluster/cluster.hpp"
#include "actors/session.hpp"
#include "apps/lib/step_observer.hpp"
#include "apps/lib/train_report.hpp"
#include "ops/sync_replicas.hpp"

namespace actorflow::apps {

/// TensorFlow's NanTensorHook, on the loss every step already fetches: the
/// variables are shared, so a diverged run is diverged for every worker.
/// Throws naming `task`, the loss and the step.
void require_finite_loss(float loss, int64_t step, const std::string& task);

/// Whether a synchronous worker's step failed because the chief finished:
/// it closed the token queue (out of range for a waiting dequeue) and shut
/// the accumulators (cancelled).
inline bool chief_finished(const error& e) {
  return e.code() == error_code::out_of_range || e.code() == error_code::cancelled;
}

/// --progress-every N: prints `progress step=<global step> t=<seconds since
/// the epoch>` after every N of this worker's completed steps (0: never),
/// flushed at once: a harness that watches the output and kills tasks with
/// -9 (tests/support/cluster_chaos.hpp) sees when steps flow, and a buffered
/// line would die with the process.
class progress_printer {
 public:
  explicit progress_printer(int64_t every) : every_(every) {}
  /// After each completed step, with the global step it reached.
  void step_done(int64_t global_step);

 private:
  int64_t every_, steps_ = 0;
};

/// A cluster worker's step observer (--trace-steps, --profile): its files
/// named after the task ("trace-worker1-<step>.json").
step_observer worker_observer(const std::string& out, const std::string& job, int task,
                              const std::vector<int64_t>& trace_steps, bool profile);

/// What a worker runs to (re)establish the shared state after a task came
/// back: the chief's initializer, its readiness test, and what sets the
/// worker's own variables (its local step in synchronous mode).
struct recovery_ops {
  operation init;  ///< sets every shared variable (the chief runs it)
  output ready;    ///< true once every variable `init` sets is set
  /// Optional: sets this worker's own variables; run at the start, and again
  /// when a step finds one unset (a ps task restarted without them).
  std::function<void(session&)> set_local;
  /// Each variable of `init` with its own initializer (variable_initializers):
  /// when a ps task comes back without its shard, the chief sets only what
  /// it lost. Empty: the chief runs `init` again.
  std::vector<variable_initializer> variables;
};

/// Runs steps, riding out lost tasks: a step that fails because a task went
/// down (or is not back yet) is retried until the recovery deadline; the
/// session reconnects and registers its partitions again by itself.
class recovering_runner {
 public:
  recovering_runner(session& s, recovery_ops ops, bool chief, double recovery_seconds)
      : s_(s), ops_(std::move(ops)), chief_(chief), recovery_seconds_(recovery_seconds) {}

  template <class F>
  auto operator()(F&& step) {
    double deadline = 0;
    for (;;) {
      try {
        return step();
      } catch (const error& e) {
        if (!recoverable(e.code())) throw;
        if (deadline == 0) deadline = start_retrying(e);
        if (now_seconds() > deadline) throw;
        repair(e.code());
      }
    }
  }

  /// Until every variable is set (by the chief, or restored by the ps
  /// tasks): the chief's init sets them in no particular order.
  void wait_initialized();
  /// The chief: initializes the variables unless the ps tasks restored them
  /// (the global step readable); the others wait until they are set. True
  /// for a chief that found them set: a restarted chief, or a resumed run.
  bool initialize_or_wait(const variable& global_step);

 private:
  // A task down or not back yet, a step that timed out on it, a variable it
  // lost (restarted without a shard): worth retrying.
  static bool recoverable(error_code code) {
    return code == error_code::unavailable || code == error_code::deadline_exceeded ||
           code == error_code::failed_precondition;
  }
  double start_retrying(const error& e) const;
  void repair(error_code code);
  bool variables_ready();
  void try_run(operation op);
  void try_set_local();
  void initialize_missing();

  session& s_;
  recovery_ops ops_;
  bool chief_;
  double recovery_seconds_;
};

/// The chief's side of synchronous training: one aggregation per global
/// step, on its own thread, until the last; then the token queue closes so
/// that no worker waits on. Stopped (and joined) on every way out.
class aggregation_thread {
 public:
  /// `restarted`: the chief found the variables set (initialize_or_wait);
  /// it first hands out a token per worker (sync_replicas_ops::chief_init_tokens).
  aggregation_thread(session& s, const sync_replicas_ops& sync, recovering_runner& run,
                     int64_t last_step, bool restarted);
  /// On a way out before the last step (an error): stops the loop within
  /// its current step (at most the step timeout) and joins it.
  ~aggregation_thread();
  /// Waits for the aggregation to end after the last step; false when it failed.
  bool join();

 private:
  void loop(session& s, const sync_replicas_ops& sync, recovering_runner& run, int64_t last_step,
            bool restarted);

  std::atomic<bool> failed_{false}, stop_{false};
  std::thread thread_;
};

/// Asks every ps task to save its shard, off the training loop: a ps task
/// that dies mid-save costs the saver its timeout, not the workers their steps.
class shard_saver {
 public:
  shard_saver(cluster_connection& cluster, int num_ps) : cluster_(cluster), num_ps_(num_ps) {}
  ~shard_saver() { wait(); }

  /// Starts saving step `step` unless a save is still running.
  void save(int64_t step);
  /// Saves step `step` after any save still running, and waits for it.
  void save_and_wait(int64_t step) {
    wait();
    save(step);
    wait();
  }
  void wait() {
    if (pending_.valid()) pending_.wait();
  }

 private:
  cluster_connection& cluster_;
  int num_ps_;
  std::future<void> pending_;
};

/// A chief's save schedule: `every` steps (0: never), counted in global
/// steps, which other workers advance too.
class save_schedule {
 public:
  save_schedule(int64_t every, int64_t step) : every_(every), saved_at_(step) {}
  /// Whether `step` crossed a multiple of `every` since the last save.
  bool due(int64_t step) {
    if (every_ <= 0 || step / every_ <= saved_at_ / every_) return false;
    saved_at_ = step;
    return true;
  }

 private:
  int64_t every_, saved_at_;
};

}  // namespace actorflow::apps
