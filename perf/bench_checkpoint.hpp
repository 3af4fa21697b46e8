// The checkpoint group (`actorflow-bench --only checkpoint`): how fast a large
// model is saved, beside the disk's own sequential write rate measured in the
// same run and directory, and what a save in the background costs a training
// step.
#pragma once
#include <string>

#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

struct checkpoint_bench_options {
  /// The model's size, in GiB (the disk rate writes as many bytes).
  double gib = 1.0;
  /// Where the files go; empty: a fresh directory under $TMPDIR (or /tmp),
  /// removed afterwards.
  std::string dir;
  /// Rounds of each rate, alternating; the figures are medians.
  int rounds = 6;
  /// Background saves of each kind (paced as by default, and unpaced), each
  /// between runs of steps without one.
  int background_saves = 6;
};

/// checkpoint_disk_write_mb_s, checkpoint_save_mb_s and their ratio; the
/// pause snapshot_variables takes; the MLP's step with and without a save in
/// the background, and their ratio.
void add_checkpoint_rows(const add_row_fn& add_row, const checkpoint_bench_options& options);

}  // namespace actorflow::bench
