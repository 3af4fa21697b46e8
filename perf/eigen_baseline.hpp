// Eigen's own GEMM, alone, as the baseline for the session's matmul. This
// file's .cpp is built with OpenMP so Eigen runs its own multi-threaded product.
#pragma once

namespace actorflow::bench {

/// GFLOP/s of Eigen's fp32 product C = A(m x k) * B(k x n) on `threads` threads.
double eigen_gemm_gflops(int m, int k, int n, int threads);

}  // namespace actorflow::bench
