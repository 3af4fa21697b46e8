// The stragglers group (`actorflow-bench --only stragglers`, long: only when
// named): the paper's backup-worker experiment (section 6.3, Figure 8) on
// 127.0.0.1. The Fashion-MNIST MLP trains synchronously, each step averaging
// the first N = 8 gradients, with b = 0 to 4 backup workers (N + b worker
// processes, 1 ps task), while every worker is a simulated straggler
// (actorflow-train --straggler-delay, apps/lib/straggler_delay.hpp): before
// each of its steps it sleeps for a log-normal draw, the same draws for
// worker i's step s whatever b is. A step's time is the time between two of
// the chief's aggregations. For each b: the median and 90th-percentile step
// time and the paper's normalized speedup t(0)/t(b) x N/(N+b); the figure
// laid out like Figure 8. On 2 cores the workers share the cores: the
// injected delays, not the MLP's computation, make the steps' tail.
#pragma once
#include <string>

#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

/// backup_* rows (docs/benchmarks.md; a NaN value is a run that failed, its
/// note saying why) and the figure at `svg` (empty: none).
void add_straggler_rows(const add_row_fn& add_row, const std::string& svg);

}  // namespace actorflow::bench
