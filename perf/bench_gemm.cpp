#include "perf/bench_gemm.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include "actors/session.hpp"
#include "devices/cpu/gemm_library.hpp"
#include "ops/array.hpp"
#include "ops/linalg.hpp"
#include "ops/state.hpp"
#include "perf/bench_util.hpp"

namespace actorflow::bench {

namespace {

// c (rows x cols, row stride ldc) = op(a) x op(b), row-major, on this thread.
using block_gemm =
    std::function<void(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                       int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc)>;

void eigen_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float* c, int64_t ldc) {
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using stride = Eigen::OuterStride<>;
  Eigen::Map<matrix, 0, stride> out(c, m, n, stride(ldc));
  Eigen::Map<const matrix, 0, stride> lhs(a, ta ? k : m, ta ? m : k, stride(lda));
  Eigen::Map<const matrix, 0, stride> rhs(b, tb ? n : k, tb ? k : n, stride(ldb));
  if (!ta && !tb) out.noalias() = lhs * rhs;
  if (ta && !tb) out.noalias() = lhs.transpose() * rhs;
  if (!ta && tb) out.noalias() = lhs * rhs.transpose();
  if (ta && tb) out.noalias() = lhs.transpose() * rhs.transpose();
}

void* open_library(const char* path, std::string* missing) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle && missing) *missing = std::string(path) + " not installed";
  return handle;
}

// A serial CBLAS (OpenBLAS's or BLIS's serial build): their own cblas_sgemm.
std::optional<block_gemm> cblas_library(const char* path, std::string* missing) {
  using cblas_sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                               int, float, float*, int);
  void* handle = open_library(path, missing);
  if (!handle) return std::nullopt;
  auto sgemm = reinterpret_cast<cblas_sgemm>(dlsym(handle, "cblas_sgemm"));
  if (!sgemm) return std::nullopt;
  constexpr int row_major = 101, no_trans = 111, trans = 112;
  return block_gemm([sgemm](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                            int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
    sgemm(row_major, ta ? trans : no_trans, tb ? trans : no_trans, int(m), int(n), int(k), 1.0f, a,
          int(lda), b, int(ldb), 0.0f, c, int(ldc));
  });
}

// oneDNN's sgemm through the library's own call (devices/cpu/gemm_library.hpp),
// when actorflow was built with it.
std::optional<block_gemm> onednn_library(std::string* missing) {
  if (std::string(cpu::gemm_library()) != "onednn") {
    if (missing) *missing = "actorflow built without oneDNN (or ACTORFLOW_CPU_GEMM=eigen)";
    return std::nullopt;
  }
  return block_gemm([](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                       int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
    cpu::library_sgemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  });
}

std::optional<block_gemm> find_library(const std::string& name, std::string* missing) {
  static std::map<std::string, std::optional<block_gemm>> found;
  if (auto it = found.find(name); it != found.end()) return it->second;
  std::optional<block_gemm> lib;
  if (name == "eigen") lib = block_gemm(eigen_block);
  if (name == "openblas")
    lib = cblas_library("/usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0", missing);
  if (name == "blis")
    lib = cblas_library("/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4", missing);
  if (name == "onednn" || name == "onednn_unpadded") lib = onednn_library(missing);
  return found[name] = lib;
}

// The product in 2 blocks per thread along its longer output side, as
// actorflow's matmul splits it.
void split_gemm(const block_gemm& gemm, const gemm_shape& s, const float* a, const float* b,
                float* c, int threads) {
  const bool split_cols = s.n >= s.m;
  const int64_t dim = split_cols ? s.n : s.m, parts = std::min<int64_t>(2 * threads, dim);
  const int64_t lda = s.transpose_a ? s.m : s.k, ldb = s.transpose_b ? s.k : s.n;
  tbb::parallel_for(
      int64_t{0}, parts,
      [&](int64_t p) {
        const int64_t lo = dim * p / parts, hi = dim * (p + 1) / parts;
        if (split_cols) {
          const float* bp = s.transpose_b ? b + lo * ldb : b + lo;
          gemm(s.transpose_a, s.transpose_b, s.m, hi - lo, s.k, a, lda, bp, ldb, c + lo, s.n);
        } else {
          const float* ap = s.transpose_a ? a + lo : a + lo * lda;
          gemm(s.transpose_a, s.transpose_b, hi - lo, s.n, s.k, ap, lda, b, ldb, c + lo * s.n, s.n);
        }
      },
      tbb::simple_partitioner());
}

}  // namespace

const std::vector<std::string>& gemm_library_names() {
  static const std::vector<std::string> names{"eigen", "openblas", "blis", "onednn",
                                              "onednn_unpadded"};
  return names;
}

std::optional<double> library_gemm_gflops(const std::string& library, const gemm_shape& s,
                                          int threads, std::string* missing) {
  auto gemm = find_library(library, missing);
  if (!gemm) return std::nullopt;
  Eigen::ArrayXf a = Eigen::ArrayXf::Random(int64_t(s.m) * s.k);
  Eigen::ArrayXf b = Eigen::ArrayXf::Random(int64_t(s.k) * s.n);
  Eigen::ArrayXf c(int64_t(s.m) * s.n);
  tbb::task_arena arena(threads);
  const double flops = 2.0 * s.m * s.n * s.k;
  const int repeats = flops > 1e9 ? 10 : 50;
  double secs = 0;
  // oneDNN as it is: operands read in place with rows 2 KB apart stay so.
  if (library == "onednn_unpadded") cpu::set_row_padding(cpu::row_padding::never);
  arena.execute([&] {
    secs = median_seconds(repeats, 3,
                          [&] { split_gemm(*gemm, s, a.data(), b.data(), c.data(), threads); });
  });
  cpu::set_row_padding(cpu::row_padding::automatic);
  return flops / secs / 1e9;
}

double session_gemm_gflops(const gemm_shape& s) {
  const int m = s.m, n = s.n, k = s.k;
  const bool ta = s.transpose_a, tb = s.transpose_b;
  graph g;
  auto a = placeholder(g, dtype::float32, ta ? shape{k, m} : shape{m, k}, "a");
  auto b = placeholder(g, dtype::float32, tb ? shape{n, k} : shape{k, n}, "b");
  auto c = matmul(a, b, ta, tb);
  session sess(g);
  auto random = [](int rows, int cols) {
    tensor t(dtype::float32, {rows, cols});
    t.mutable_flat<float>() = Eigen::ArrayXf::Random(t.num_elements());
    return t;
  };
  feed_list feeds{{a, ta ? random(k, m) : random(m, k)}, {b, tb ? random(n, k) : random(k, n)}};
  const double flops = 2.0 * m * k * n;
  const int repeats = flops > 1e9 ? 10 : 50;
  double secs = median_seconds(repeats, 3, [&] { sess.run(feeds, {c}); });
  return flops / secs / 1e9;
}

void add_gemm_rows(const add_row_fn& add_row, int threads) {
  // The MLP's first layer (batch 128, 784 -> 512) and the CNN's first dense
  // layer (3136 -> 1024): forward, the weights' gradient (a transposed) and
  // the input's (b transposed). The CNN's 5x5 convolution as im2col x filter
  // goes through conv2d's own kernel, so only the libraries are measured on it.
  // The `served` shapes are those dense layers for one image: a served
  // request's product without batching.
  const std::vector<gemm_shape> shapes{{1024, 1024, 1024, false, false, "1024"},
                                       {128, 512, 784, false, false, "mlp_fc1"},
                                       {784, 512, 128, true, false, "mlp_fc1_dw"},
                                       {128, 784, 512, false, true, "mlp_fc1_dx"},
                                       {128, 1024, 3136, false, false, "cnn_fc1"},
                                       {3136, 1024, 128, true, false, "cnn_fc1_dw"},
                                       {128, 3136, 1024, false, true, "cnn_fc1_dx"},
                                       {25088, 64, 800, false, false, "cnn_conv2_im2col"},
                                       {1, 512, 784, false, false, "mlp_fc1_served"},
                                       {1, 1024, 3136, false, false, "cnn_fc1_served"}};
  for (const auto& s : shapes) {
    // A session run feeds both operands, so at one row it times the feed of the
    // weights more than the product: the served shapes are the libraries' alone.
    const bool session_too = s.tag != "cnn_conv2_im2col" && s.m > 1;
    std::map<std::string, std::vector<double>> rounds;
    std::map<std::string, std::string> missing;
    // Alternating rounds, each one's median: the machine's load drifts, and a
    // drift between two long blocks would skew the ratios.
    for (int round = 0; round < 5; ++round) {
      for (const auto& lib : gemm_library_names())
        if (auto v = library_gemm_gflops(lib, s, threads, &missing[lib])) rounds[lib].push_back(*v);
      if (session_too) rounds["session"].push_back(session_gemm_gflops(s));
    }
    std::string best_lib;
    double best = 0;
    for (const auto& lib : gemm_library_names()) {
      if (rounds[lib].empty()) {
        add_row(fmt::format("gemm_gflops_{}_{}", s.tag, lib), std::nan(""), "GFLOP/s",
                missing[lib]);
        continue;
      }
      double v = median(rounds[lib]);
      if (v > best) best = v, best_lib = lib;
      add_row(fmt::format("gemm_gflops_{}_{}", s.tag, lib), v, "GFLOP/s",
              lib == "onednn_unpadded"
                  ? fmt::format("onednn alone without padded rows, its blocks on {} TBB threads",
                                threads)
                  : fmt::format("{} alone, its blocks on {} TBB threads", lib, threads));
    }
    if (session_too) {
      double v = median(rounds["session"]);
      add_row(
          fmt::format("gemm_gflops_{}", s.tag), v, "GFLOP/s",
          fmt::format("session matmul ({}): {:.2f}x the best library ({}){}", cpu::gemm_library(),
                      v / best, best_lib, s.tag == "1024" ? "; target >= 0.95" : ""));
    }
  }
}

}  // namespace actorflow::bench
