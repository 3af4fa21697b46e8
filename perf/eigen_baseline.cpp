#include "perf/eigen_baseline.hpp"

#include <Eigen/Core>

#include "perf/bench_util.hpp"

namespace actorflow::bench {

double eigen_gemm_gflops(int m, int k, int n, int threads) {
  Eigen::setNbThreads(threads);
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  matrix a = matrix::Random(m, k), b = matrix::Random(k, n), c(m, n);
  double flops = 2.0 * m * k * n;
  int repeats = flops > 1e9 ? 10 : 50;
  double s = median_seconds(repeats, 3, [&] { c.noalias() = a * b; });
  return flops / s / 1e9;
}

}  // namespace actorflow::bench
