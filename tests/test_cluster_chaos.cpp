// The short chaos runs (tests/support/cluster_chaos.hpp; the long ones are
// `actorflow-bench --only chaos`): the MLP, then the language model, trained
// synchronously by 3 workers (1 backup) over 2 ps tasks while a seeded
// random task, the chief and the ps tasks among them, is killed with -9
// every 6 to 10 s for 45 s and restarted 1 to 3 s later. Training must
// finish at its accuracy (the MLP) or perplexity (the LM), steps must flow
// again within 10 s of each restart, and no restore may lose more steps
// than were made since the last checkpoint before its kill.
#include <doctest/doctest.h>

#include <string>

#include "tests/support/cluster_chaos.hpp"
#include "tests/test_util.hpp"

using actorflow::testing::chaos_options;
using actorflow::testing::chaos_result;
using actorflow::testing::run_chaos;

namespace {

// 2500 global steps outlast the 45 s of kills on 2 cores (about 22 ms a
// step); uninterrupted, 1200 steps reach test_acc 0.87 to 0.88 (the skipped
// case below measures it).
chaos_options short_chaos() {
  chaos_options o;
  o.train_binary = ACTORFLOW_TRAIN_BINARY;
  // Seed 16 kills the chief at about 7 s, ps1 at 16 s, worker1 at 22 s,
  // ps0 at 30 s and the chief again at 37 s.
  o.seed = 16;
  o.ps = 2, o.workers = 3;
  o.worker_flags = {"--sync", "--backup-workers", "1", "--max-steps", "2500"};
  o.checkpoint_every = 50;
  o.kill_every_min = 6, o.kill_every_max = 10;
  o.restart_min = 1, o.restart_max = 3;
  o.chaos_seconds = 45;
  o.timeout_seconds = 240;
  return o;
}

// The end of each task's output, and every error line, for a failure.
std::string evidence(const chaos_result& r) {
  std::string s;
  for (auto& line : r.error_lines) s += line + "\n";
  for (auto& [task, log] : r.logs)
    s += "--- " + task + " ---\n" + log.substr(log.size() > 2500 ? log.size() - 2500 : 0);
  return s;
}

// What every chaos run must show, whatever the model: the kills happened,
// every task ended as it should, steps flowed again within 10 s of each
// restart, and no kill cost more than the steps since the last checkpoint
// before it.
void check_recovered(const chaos_result& r) {
  CHECK(r.failure.empty());
  CHECK(r.kills.size() >= 4);
  for (auto& [task, status] : r.exit_status) {
    INFO(task);
    // Workers finish; ps tasks serve until stopped (an exit is a crash).
    CHECK(status == (task.rfind("worker", 0) == 0 ? 0 : -1));
  }
  // Every gap closed, none above 10 s (the table has each).
  CHECK(r.max_gap() >= 0);
  CHECK(r.max_gap() <= 10);
  // The chief saved checkpoints, and no kill cost more than the steps since
  // the last one before it: as the chief counts them and as the workers'
  // steps show it.
  CHECK(!r.checkpoints.empty());
  for (auto& rec : r.recoveries) CHECK(rec.lost <= rec.bound());
  CHECK(r.steps_lost() <= r.lost_bound());
  for (auto& k : r.kills) {
    INFO(k.task.name() << " killed at " << k.killed_at << " s");
    CHECK(k.taken_back() <= k.lost_bound());
  }
}

}  // namespace

TEST_CASE("chaos: kill -9 of a random task every 6-10 s, sync MLP 2 ps + 3 workers (1 backup)") {
  auto r = run_chaos(short_chaos());
  MESSAGE(r.table());
  INFO(evidence(r));
  check_recovered(r);
  CHECK(r.test_acc >= 0.84);
}

namespace {

// The LSTM language model (tests/test_lm_cluster.cpp's small shape: 2000
// words, embedding and hidden 64, batch 8, on 40,000 words of fortunes),
// synchronous over the same cluster, a checkpoint every 20 global steps.
// 3000 steps take about 52 s uninterrupted on 2 cores.
chaos_options short_lm_chaos() {
  chaos_options o = short_chaos();
  // clang-format off
  o.worker_flags = {"--model", "lstm_lm", "--batch", "8", "--embedding", "64", "--hidden", "64",
                    "--vocab", "2000", "--max-train-tokens", "40000", "--max-valid-tokens", "4000",
                    "--sync", "--backup-workers", "1", "--max-steps", "3000"};
  // clang-format on
  o.checkpoint_every = 20;
  return o;
}

}  // namespace

TEST_CASE("chaos: the same kills, the language model synchronous over 2 ps + 3 workers" *
          doctest::test_suite("fortunes")) {
  if (!actorflow::testing::have_fortunes()) return;
  auto r = run_chaos(short_lm_chaos());
  MESSAGE(r.table());
  INFO(evidence(r));
  check_recovered(r);
  // Uninterrupted, the same flags reach 82 (the skipped case below).
  CHECK(r.valid_ppl > 1);
  CHECK(r.valid_ppl <= 90);
}

TEST_CASE("chaos: the language model uninterrupted" * doctest::skip()) {
  auto o = short_lm_chaos();
  o.chaos_seconds = 0;
  auto r = run_chaos(o);
  MESSAGE(r.table());
  INFO(evidence(r));
  CHECK(r.failure.empty());
}

// The same flags without kills, for the accuracy bound above: run with
// test_cluster_chaos --no-skip.
TEST_CASE("chaos: the same run uninterrupted" * doctest::skip()) {
  auto o = short_chaos();
  o.chaos_seconds = 0;
  auto r = run_chaos(o);
  MESSAGE(r.table());
  INFO(evidence(r));
  CHECK(r.failure.empty());
}
