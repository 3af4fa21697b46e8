// The language model's ps-task scaling (the paper's section 6.4, Figure 9),
// part of the scaling group: the LSTM language model on Debian's fortunes,
// 4 asynchronous workers and 1, 2, 4 and 8 ps tasks, sampled and full
// softmax, every task a process (actorflow-train) in a network namespace of
// its own behind a shaped link (perf/cluster_sim.hpp); TensorFlow's
// distributed language model (perf/tf_lm_cluster.py's tasks) on the same
// network in the same run. Words per second of the whole cluster, timed as
// TensorFlow's script times it: every worker's words after its warm-up
// steps over the time from the first worker's clock start to the last
// worker's last step. The links are slow enough that the ps tasks' links,
// not the 2 cores, limit the steps with few ps tasks; the notes give each
// run's CPU use.
#pragma once
#include <string>

#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

/// lm_ps_* and tf_lm_ps_* rows (see docs/benchmarks.md), and the figure at
/// `svg` (empty: none). Assumes network namespaces can be made.
void add_lm_scaling_rows(const add_row_fn& add_row, const std::string& svg);

}  // namespace actorflow::bench
