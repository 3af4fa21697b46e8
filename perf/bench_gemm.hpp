// The gemm group (`actorflow-bench --only gemm`): the session's matmul beside
// every float GEMM this machine's Debian packages offer, measured the way
// actorflow drives its own: the product split into blocks across a TBB arena
// of the machine's cores, each block one single-threaded library call.
// Eigen is compiled in, oneDNN is the library's own call (when it was built
// with it); OpenBLAS and BLIS (their serial builds) are opened at run time,
// so the benchmark needs neither to build.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace actorflow::bench {

struct gemm_shape {
  int m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  std::string tag;  // in the keys, e.g. "1024" or "mlp_dw"
};

/// "eigen", "openblas", "blis", "onednn", "onednn_unpadded" (oneDNN without
/// library_sgemm's padded rows: cpu::row_padding::never).
const std::vector<std::string>& gemm_library_names();

/// GFLOP/s of one library on the shape with `threads` threads; nullopt where
/// the library is not installed (why goes to *missing).
std::optional<double> library_gemm_gflops(const std::string& library, const gemm_shape& shape,
                                          int threads, std::string* missing = nullptr);

/// GFLOP/s of a session running matmul on the shape (fed, fetched).
double session_gemm_gflops(const gemm_shape& shape);

using add_row_fn =
    std::function<void(std::string key, double value, std::string unit, std::string note)>;
/// The group's rows: for each shape of 1024^3, the MLP's and the CNN's
/// (forward and both backprops), gemm_gflops_<shape>_<library> for each
/// library installed and gemm_gflops_<shape> for the session, in alternating
/// rounds. (Eigen's own OpenMP-threaded product is not measured: compiled
/// with OpenMP in one file, its GEMM would replace the others' by the ODR.)
void add_gemm_rows(const add_row_fn& add_row, int threads);

}  // namespace actorflow::bench
