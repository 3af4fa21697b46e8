// A chaos run of an actorflow-train cluster on 127.0.0.1: ps tasks and
// workers as real processes; every so often (a seeded random interval) a
// random task is killed with -9 and, after a random delay, started again
// with the same command line; then training is left to finish. The harness
// watches every process's output and reports, per kill, how long the
// cluster took to complete steps again, and from the chief's lines the
// checkpoints it saved, the checkpoints it restored and the steps each
// restore lost. Shared by tests/test_cluster_chaos.cpp (the short form) and
// actorflow-bench's "chaos" group (the long form).
//
// What it reads (each a line; extra text after is allowed):
//   progress step=<global step> t=<unix seconds>    every worker, --progress-every
//   aggregated step=<global step> t=<unix seconds>  a synchronous chief's aggregations
//   checkpoint step=<k> saved in <ms> ms (pause <p> ms)                the chief
//   recovery: restored checkpoint step=<k> (global step was <g>: <n> steps lost)
//   test_acc=<accuracy>                               the chief, at the end (MLP)
//   valid_ppl=<perplexity> words_per_s=...            the chief, at the end (LM)
//
// Every process it starts it stops, on every way out (an exception, a
// timeout); every wait is bounded by the run's timeout.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace actorflow::testing {

/// A task of the cluster: job "ps" or "worker", and its index.
struct chaos_task {
  std::string job;
  int index = 0;
  std::string name() const { return job + std::to_string(index); }  // "ps1", "worker0"
};

struct chaos_options {
  std::string train_binary;  ///< actorflow-train
  uint64_t seed = 1;         ///< picks the intervals, the tasks and the delays
  int ps = 2, workers = 3;
  std::vector<std::string> ps_flags;      ///< every ps task's own flags
  std::vector<std::string> worker_flags;  ///< every worker's (--sync, --max-steps, ...)
  std::vector<std::string> chief_flags;   ///< worker 0's, after worker_flags
  /// > 0: the chief also gets --checkpoint-dir <run dir>/checkpoints
  /// --checkpoint-every N (one directory for the whole cluster).
  int64_t checkpoint_every = 0;
  double kill_every_min = 15, kill_every_max = 30;  ///< s from one kill to the next
  double restart_min = 1, restart_max = 3;          ///< s from a kill to its restart
  /// false: a killed task stays down (a backup worker lost for good).
  bool restart = true;
  /// How long kills go on, from the first completed step; 0: no kill at all
  /// (the uninterrupted run of the same flags).
  double chaos_seconds = 180;
  /// The tasks that may be killed; empty: every ps task and every worker.
  std::vector<chaos_task> victims;
  double timeout_seconds = 600;  ///< the whole run, start to the last exit
  int threads = 1;               ///< --threads of every task
  bool keep_dir = false;         ///< keep the run's directory (outputs, checkpoints)
};

/// One kill and its restart. Times are seconds since the run's first
/// completed step (the chaos clock); -1 where it did not happen.
struct chaos_kill {
  chaos_task task;
  double killed_at = -1, restarted_at = -1;
  int64_t step_before = 0;         ///< the global step of the last progress line before the kill
  int64_t checkpoint_before = -1;  ///< the newest checkpoint step the chief reported before it
  int64_t first_step_after = -1;   ///< the first global step completed after the restart
  /// Steps flow again: seconds from the restart (the new process's start) to
  /// the first `progress` line of any worker stamped after it, that is, to
  /// the first step the cluster completed with the task back. -1: none.
  double gap = -1;
  /// Seconds from the restart to the first step above step_before: with the
  /// steps a restore took back made again (-1: never).
  double caught_up = -1;
  std::string restart_error;  ///< why the restart failed; empty when it did not

  /// Steps the cluster went back, as the workers' lines show it (whatever
  /// the chief says): step_before - first_step_after, 0 when it went on.
  int64_t taken_back() const {
    return first_step_after < 0 ? 0 : std::max<int64_t>(0, step_before - first_step_after);
  }
  /// The most a kill may cost: the steps since the last checkpoint before it.
  int64_t lost_bound() const { return step_before - std::max<int64_t>(checkpoint_before, 0); }
};

/// A `recovery:` line of the chief, with the checkpoint it should have used.
struct chaos_recovery {
  double at = 0;  ///< chaos clock, when the line arrived
  int64_t restored = 0, global_step = 0, lost = 0;
  /// The newest checkpoint the chief reported before the last kill ahead of
  /// this line (-1: none): at most global_step - that were lost.
  int64_t checkpoint_before_kill = -1;
  int64_t bound() const {
    return global_step - (checkpoint_before_kill < 0 ? 0 : checkpoint_before_kill);
  }
};

struct chaos_result {
  std::vector<chaos_kill> kills;
  std::vector<chaos_recovery> recoveries;
  std::vector<std::pair<double, int64_t>> checkpoints;  ///< (chaos clock, step), as reported
  /// Each task's last process: its exit status, -1 while it ran (a ps task
  /// serves until the harness stops it, so it should be -1; a worker 0).
  std::map<std::string, int> exit_status;
  double test_acc = -1;   ///< the chief's final line (MLP); -1: none
  double valid_ppl = -1;  ///< the chief's final line (LM); -1: none
  int64_t last_step = 0;  ///< the global step of the last progress line
  /// (global step, unix seconds) of each of the chief's `aggregated` lines,
  /// in order: the times between them are the synchronous step times.
  std::vector<std::pair<int64_t, double>> aggregations;
  double wall_seconds = 0;   ///< the first start to the chief's exit
  double chaos_started = 0;  ///< the first completed step, since the first start
  bool timed_out = false;
  std::string failure;  ///< why the run stopped early (a task that did not start, the timeout)
  std::vector<std::string> error_lines;     ///< "task: line" for lines with "error"
  std::map<std::string, std::string> logs;  ///< each task's output, every process of it

  int64_t steps_lost() const;
  int64_t lost_bound() const;  ///< sum of each recovery's bound
  double max_gap() const;      ///< -1 when a gap never closed
  /// The per-kill table, the recoveries and the totals, for a test's MESSAGE.
  std::string table() const;
  /// What went wrong, in one note ("" when nothing did): the failure, the
  /// tasks that did not end as they should (a worker exits 0, a ps task
  /// serves until stopped, a task killed for good is -1), the first error lines.
  std::string problems() const;
};

/// Runs the chaos: starts the cluster, kills (and restarts) tasks for
/// chaos_seconds, lets training finish, stops everything. Throws only for
/// options it cannot run (no binary, no tasks).
chaos_result run_chaos(const chaos_options& options);

}  // namespace actorflow::testing
