// What every cluster trainer of actorflow-train shares (the image models'
// cluster_training.cpp and the language model's lm_cluster_training.cpp):
// steps that ride out a lost task, the chief's synchronous aggregation loop,
// and the chief's consistent cluster checkpoints.
#pragma once
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/checkpoint.hpp"
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
/// line would die with the process. A synchronous chief's aggregation
/// thread prints `aggregated step=<global step> t=...` lines (`label`
/// "aggregated") after every N global steps it made: the times between them
/// are the step times, whichever workers' gradients made each step.
class progress_printer {
 public:
  explicit progress_printer(int64_t every, std::string label = "progress")
      : every_(every), label_(std::move(label)) {}
  /// After each completed step, with the global step it reached.
  void step_done(int64_t global_step);

 private:
  int64_t every_, steps_ = 0;
  std::string label_;
};

/// A cluster worker's step observer (--trace-steps, --profile): its files
/// named after the task ("trace-worker1-<step>.json").
step_observer worker_observer(const std::string& out, const std::string& job, int task,
                              const std::vector<int64_t>& trace_steps, bool profile);

/// A trainer's connection options: a task not up, or a step that does not
/// finish (a task that hangs, stopped rather than dead), is given up on
/// within --recovery-seconds, then retried until it is back or that time
/// ends, so that a hang becomes an error naming the task.
cluster_options recovering_cluster_options(double recovery_seconds);

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
  /// without checkpoints, when a ps task comes back without its variables,
  /// the chief sets only what it lost. Empty: the chief runs `init` again.
  std::vector<variable_initializer> variables;
  /// Optional, the chief's: sets every ps task back to the newest consistent
  /// checkpoint; false when there is none (then the lost variables are set
  /// to their initial values).
  std::function<bool(session&)> restore;
  /// Optional, the chief's: runs after it set the variables back (restored
  /// or re-initialized them). Synchronous training hands out tokens again
  /// there (sync_replicas_ops::chief_init_tokens): the workers wait for
  /// tokens that a lost queue held, and an aggregation in flight waits for
  /// their gradients.
  std::function<void(session&)> after_repair;
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
  /// The chief: initializes the variables unless the ps tasks hold them
  /// (a restarted chief) or a checkpoint has them (a resumed run, or ps
  /// tasks that lost theirs); the others wait until they are set. True for
  /// a chief that did not start from the initial values.
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
  void repair_lost_variables();

  session& s_;
  recovery_ops ops_;
  bool chief_;
  double recovery_seconds_;
  // The aggregation thread and the training loop may both find the
  // variables lost: one repairs them, the other finds them set.
  std::mutex repair_mutex_;
};

/// The chief's side of synchronous training: one aggregation per global
/// step, on its own thread, until the last; then the token queue closes so
/// that no worker waits on. Stopped (and joined) on every way out.
class aggregation_thread {
 public:
  /// `restarted`: the chief found the variables set (initialize_or_wait);
  /// it first hands out a token per worker (sync_replicas_ops::chief_init_tokens).
  /// `after_step` runs between two aggregations with the global step
  /// reached (a checkpoint taken there holds no update of the next step).
  /// `first_step`: the global step when the chief started; at `last_step`
  /// or past it the run has ended (a chief restarted after its predecessor
  /// finished the run and closed the tokens), and nothing is aggregated.
  aggregation_thread(session& s, const sync_replicas_ops& sync, recovering_runner& run,
                     int64_t first_step, int64_t last_step, bool restarted,
                     std::function<void(int64_t)> after_step = {});
  /// On a way out before the last step (an error): stops the loop within
  /// its current step (at most the step timeout) and joins it.
  ~aggregation_thread();
  /// Waits for the aggregation to end after the last step; false when it failed.
  bool join();

 private:
  void loop(session& s, const sync_replicas_ops& sync, recovering_runner& run, int64_t last_step,
            bool restarted, const std::function<void(int64_t)>& after_step);

  std::atomic<bool> failed_{false}, stop_{false};
  std::thread thread_;
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

/// The chief's cluster checkpoints (--checkpoint-dir, --checkpoint-every):
/// one consistent cut across every ps task (actors/checkpoint.hpp), taken
/// between two aggregations in synchronous training; and, when a ps task
/// came back without its variables, every ps task set back to the newest one.
/// Safe to call from the aggregation thread and the training loop at once.
class cluster_checkpointer {
 public:
  /// `dir` empty: no checkpoints (every > 0 then is an error).
  cluster_checkpointer(const std::string& dir, int64_t every, size_t keep_last);
  bool enabled() const { return manager_ != nullptr; }

  /// Global step `step` was reached: starts a save when one is due and the
  /// last one is written (training goes on while the shards are written).
  /// Prints "checkpoint step=<k> saved in <ms> ms (pause <p> ms)" for each
  /// save that completed; a save that failed is a warning, not the run's end.
  void at_step(session& s, int64_t step);
  /// Saves `step` and waits for it (the end of training).
  void save_now(session& s, int64_t step);
  /// Sets every ps task back to the newest checkpoint; prints
  /// "recovery: restored checkpoint step=<k> (global step was <g>: <n> steps lost)".
  /// Its step, or -1 when there is none to restore.
  int64_t restore(session& s);

 private:
  void finish_pending(bool wait);

  std::unique_ptr<checkpoint_manager> manager_;
  save_schedule schedule_{0, 0};
  std::mutex mutex_;
  std::future<std::string> pending_;
  int64_t pending_step_ = 0, saved_step_ = -1;
  double pending_since_ = 0;
  std::atomic<int64_t> highest_step_{0};
};

}  // namespace actorflow::apps
