// The scaling group (`actorflow-bench --only scaling`, long: only when
// named): the paper's synchronous replica microbenchmark (section 6.2,
// Figure 6) on an emulated datacenter network (perf/cluster_sim.hpp): 16 ps
// tasks and 1 to 16 workers, each task in a network namespace of its own
// behind a link shaped to a NIC's rate, every task a process of
// actorflow-scaling-task. Models: a scalar per ps task (latency), dense
// 100 MB and 1 GB split over the ps tasks (bandwidth: the step against the
// time its bytes need at the link rate), and sparse tables of 1 GB and the
// largest this machine's memory allows (32 rows a step: a step time
// independent of the table's size). Each task's CPU use goes in the notes:
// on a machine of few cores this is the simulation of a larger cluster, and
// the link rates are chosen low enough that the links, not the cores, limit
// the dense and sparse steps. The language model's ps-task scaling (section
// 6.4, Figure 9) is perf/bench_lm_scaling.hpp.
#pragma once
#include <string>

#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

struct scaling_bench_options {
  /// Which experiments: scalar, dense, sparse, lm (perf/bench_lm_scaling.hpp), or all.
  std::string experiments = "all";
  /// The most workers (1, 2, 4, ... up to it).
  int max_workers = 16;
  /// Where the figure (SVG, laid out like the paper's Figure 6) goes; empty: none.
  std::string svg = "scaling-figure6.svg";
  /// Where the language model's figure (laid out like Figure 9) goes; empty: none.
  std::string lm_svg = "scaling-figure9.svg";
};

/// sync_* rows (see docs/benchmarks.md). Where network namespaces cannot be
/// made, says why on stderr and adds no row.
void add_scaling_rows(const add_row_fn& add_row, const scaling_bench_options& options);

}  // namespace actorflow::bench
