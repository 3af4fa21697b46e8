#include "perf/bench_chaos.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "tests/support/cluster_chaos.hpp"

namespace actorflow::bench {

namespace {

// 8000 global steps outlast the 3 minutes of kills: uninterrupted, 5000
// took 123 s on 2 idle cores (test_acc 0.89) and 240 s on busy ones.
testing::chaos_options mlp_run(uint64_t seed) {
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

// The LSTM language model on the same cluster and kills: 2000 words,
// embedding and hidden 64, batch 8, 40,000 words of fortunes; 12,000 global
// steps (about 17 ms each on 2 idle cores) outlast the kills.
testing::chaos_options lm_run(uint64_t seed) {
  testing::chaos_options o = mlp_run(seed);
  // clang-format off
  o.worker_flags = {"--model", "lstm_lm", "--batch", "8", "--embedding", "64", "--hidden", "64",
                    "--vocab", "2000", "--max-train-tokens", "40000", "--max-valid-tokens", "4000",
                    "--sync", "--backup-workers", "1", "--max-steps", "12000"};
  // clang-format on
  o.checkpoint_every = 50;
  return o;
}

void add_kill_rows(const add_row_fn& add_row, const std::string& prefix,
                   const testing::chaos_result& r) {
  for (size_t i = 0; i < r.kills.size(); ++i) {
    auto& k = r.kills[i];
    add_row(fmt::format("{}_gap_s_{:02}", prefix, i + 1), k.gap < 0 ? NAN : k.gap, "s",
            fmt::format("{} killed at {:.1f} s (step {}), restarted at {:.1f} s; steps flowed "
                        "again{}; target <= 10",
                        k.task.name(), k.killed_at, k.step_before, k.restarted_at,
                        k.gap < 0 ? " never" : fmt::format(" at step {}", k.first_step_after)));
  }
}

// A model's chaos run and the same flags uninterrupted, as rows named
// <prefix>_*. The MLP's quality is its test accuracy (target >= 0.85), the
// LM's its validation perplexity (target: at most 1.1 times the
// uninterrupted run's).
void add_model_rows(const add_row_fn& add_row, const std::string& prefix,
                    const testing::chaos_options& options, bool lm) {
  auto chaos = testing::run_chaos(options);
  std::cerr << prefix << ":\n" << chaos.table();
  auto trouble = chaos.problems();
  add_kill_rows(add_row, prefix, chaos);
  add_row(prefix + "_kills", double(chaos.kills.size()), "",
          fmt::format("seed {}, one every 15 s for 180 s{}", options.seed,
                      trouble.empty() ? "" : "; " + trouble));
  add_row(prefix + "_max_gap_s", chaos.max_gap() < 0 ? NAN : chaos.max_gap(), "s",
          chaos.max_gap() < 0 ? "a gap never closed" : "target <= 10");
  int64_t taken_back = 0;
  for (auto& k : chaos.kills) taken_back += k.taken_back();
  add_row(prefix + "_steps_lost", double(chaos.steps_lost()), "steps",
          fmt::format("{} restores; bound {} (the steps since each kill's last checkpoint, "
                      "{} checkpoints); the workers' steps went back {} in all",
                      chaos.recoveries.size(), chaos.lost_bound(), chaos.checkpoints.size(),
                      taken_back));
  auto quiet = options;
  quiet.chaos_seconds = 0;
  auto plain = testing::run_chaos(quiet);
  std::cerr << prefix << " uninterrupted:\n" << plain.table();
  auto plain_trouble = plain.problems();
  double quality = lm ? chaos.valid_ppl : chaos.test_acc;
  double plain_quality = lm ? plain.valid_ppl : plain.test_acc;
  if (lm)
    add_row(prefix + "_valid_ppl", quality < 0 ? NAN : quality, "ppl",
            quality < 0 ? "no final valid_ppl: " + trouble
                        : fmt::format("target <= {:.2f} (1.1x uninterrupted's {:.2f})",
                                      1.1 * plain_quality, plain_quality));
  else
    add_row(prefix + "_test_acc", quality < 0 ? NAN : quality, "",
            quality < 0 ? "no final test_acc: " + trouble
                        : fmt::format("target >= 0.85 (uninterrupted: {:.4f})", plain_quality));
  add_row(prefix + "_wall_s", chaos.wall_seconds, "s",
          fmt::format("the chaos run, start to the chief's exit; {:.2f}x uninterrupted",
                      chaos.wall_seconds / plain.wall_seconds));
  add_row(prefix + "_uninterrupted_wall_s", plain_quality < 0 ? NAN : plain.wall_seconds, "s",
          fmt::format("the same flags, no kill: {} {:.4f}{}", lm ? "valid_ppl" : "test_acc",
                      plain_quality, plain_trouble.empty() ? "" : "; " + plain_trouble));
}

}  // namespace

void add_chaos_rows(const add_row_fn& add_row, uint64_t seed, const std::string& models) {
  if (models != "lm") add_model_rows(add_row, "chaos", mlp_run(seed), false);
  if (models != "mlp") add_model_rows(add_row, "chaos_lm", lm_run(seed), true);
}

}  // namespace actorflow::bench
