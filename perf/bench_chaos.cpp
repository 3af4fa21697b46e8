#include "perf/bench_chaos.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "tests/support/cluster_chaos.hpp"

namespace actorflow::bench {

namespace {

// 8000 global steps outlast the 3 minutes of kills: uninterrupted, 5000
// took 123 s on 2 idle cores (test_acc 0.89) and 240 s on busy ones.
testing::chaos_options target_run(uint64_t seed) {
  testing::chaos_options o;
  o.train_binary = ACTORFLOW_TRAIN_BINARY;
  o.seed = seed;
  o.ps = 2, o.workers = 3;
  o.worker_flags = {"--sync", "--backup-workers", "1", "--max-steps", "8000"};
  o.checkpoint_every = 100;
  o.kill_every_min = o.kill_every_max = 15;
  o.restart_min = 1, o.restart_max = 5;
  o.chaos_seconds = 180;
  o.timeout_seconds = 900;
  return o;
}

// What went wrong in a run, in one note: its failure, the tasks that did
// not end as they should (a worker exits 0, a ps task serves until
// stopped), its first error lines.
std::string problems(const testing::chaos_result& r) {
  std::vector<std::string> parts;
  if (!r.failure.empty()) parts.push_back(r.failure);
  for (auto& [task, status] : r.exit_status)
    if (status != (task.rfind("worker", 0) == 0 ? 0 : -1))
      parts.push_back(fmt::format("{} exit {}", task, status));
  for (size_t i = 0; i < r.error_lines.size() && i < 3; ++i) parts.push_back(r.error_lines[i]);
  return fmt::format("{}", fmt::join(parts, "; "));
}

void add_kill_rows(const add_row_fn& add_row, const testing::chaos_result& r) {
  for (size_t i = 0; i < r.kills.size(); ++i) {
    auto& k = r.kills[i];
    add_row(fmt::format("chaos_gap_s_{:02}", i + 1), k.gap < 0 ? NAN : k.gap, "s",
            fmt::format("{} killed at {:.1f} s (step {}), restarted at {:.1f} s; steps flowed "
                        "again{}; target <= 10",
                        k.task.name(), k.killed_at, k.step_before, k.restarted_at,
                        k.gap < 0 ? " never" : fmt::format(" at step {}", k.first_step_after)));
  }
}

}  // namespace

void add_chaos_rows(const add_row_fn& add_row, uint64_t seed) {
  auto chaos = testing::run_chaos(target_run(seed));
  std::cerr << chaos.table();
  auto trouble = problems(chaos);
  add_kill_rows(add_row, chaos);
  add_row("chaos_kills", double(chaos.kills.size()), "",
          fmt::format("seed {}, one every 15 s for 180 s{}", seed,
                      trouble.empty() ? "" : "; " + trouble));
  add_row("chaos_max_gap_s", chaos.max_gap() < 0 ? NAN : chaos.max_gap(), "s",
          chaos.max_gap() < 0 ? "a gap never closed" : "target <= 10");
  int64_t taken_back = 0;
  for (auto& k : chaos.kills) taken_back += k.taken_back();
  add_row("chaos_steps_lost", double(chaos.steps_lost()), "steps",
          fmt::format("{} restores; bound {} (the steps since each kill's last checkpoint, "
                      "{} checkpoints); the workers' steps went back {} in all",
                      chaos.recoveries.size(), chaos.lost_bound(), chaos.checkpoints.size(),
                      taken_back));
  add_row("chaos_test_acc", chaos.test_acc < 0 ? NAN : chaos.test_acc, "",
          chaos.test_acc < 0 ? "no final test_acc: " + trouble : "target >= 0.85");
  auto quiet = target_run(seed);
  quiet.chaos_seconds = 0;
  auto plain = testing::run_chaos(quiet);
  std::cerr << "uninterrupted:\n" << plain.table();
  add_row("chaos_wall_s", chaos.wall_seconds, "s",
          fmt::format("the chaos run, start to the chief's exit; {:.2f}x uninterrupted",
                      chaos.wall_seconds / plain.wall_seconds));
  auto plain_trouble = problems(plain);
  add_row("chaos_uninterrupted_wall_s", plain.test_acc < 0 ? NAN : plain.wall_seconds, "s",
          fmt::format("the same flags, no kill: test_acc {:.4f}{}", plain.test_acc,
                      plain_trouble.empty() ? "" : "; " + plain_trouble));
}

}  // namespace actorflow::bench
