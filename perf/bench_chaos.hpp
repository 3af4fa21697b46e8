// The chaos group (`actorflow-bench --only chaos`, long: only when named):
// the target run on 127.0.0.1. The MLP trains synchronously with 3
// workers (1 backup) over 2 ps tasks, the chief saving a consistent
// checkpoint of the cluster every 100 global steps, while a random task
// (the seed picks it, the ps tasks and the chief among them) is killed with
// -9 every 15 s for 3 minutes and restarted 1 to 5 s later
// (tests/support/cluster_chaos.hpp). It reports, per kill, the gap until
// steps flow again (target <= 10 s), the steps the restores lost against
// the bound (the steps since the last checkpoint before each kill), the
// final test accuracy (target >= 0.85), and the run's wall time beside the
// same flags uninterrupted. Then the same for the LSTM language model
// (chaos_lm_*), whose target is a validation perplexity at most 1.1 times
// the uninterrupted run's.
#pragma once
#include <cstdint>
#include <string>

#include "perf/bench_gemm.hpp"

namespace actorflow::bench {

/// chaos_* rows; a value of NaN is a failure, its note saying why. The
/// per-kill table goes to stderr.
/// `models`: "mlp", "lm" or "all".
void add_chaos_rows(const add_row_fn& add_row, uint64_t seed, const std::string& models);

}  // namespace actorflow::bench
