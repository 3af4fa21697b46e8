#include "devices/cpu/gemm_library.hpp"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "core/error.hpp"
#include "devices/cpu/onednn_threads.hpp"

#if defined(ACTORFLOW_HAS_ONEDNN)
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <string>
#include <vector>
#endif

namespace actorflow::cpu {

namespace {

bool library_on_at_start() {
  const char* choice = std::getenv("ACTORFLOW_CPU_GEMM");
  return !(choice && std::string_view(choice) == "eigen");
}

std::atomic<bool> library_on{library_on_at_start()};
std::atomic<row_padding> padding{row_padding::automatic};

}  // namespace

void use_gemm_library(bool on) { library_on.store(on, std::memory_order_relaxed); }

void set_row_padding(row_padding p) { padding.store(p, std::memory_order_relaxed); }

bool cpu_has_avx512_core() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
}

#if defined(ACTORFLOW_HAS_ONEDNN)

// Exported by libdnnl but declared only in oneDNN's own sources (its tests and Intel's
// TensorFlow extension call it so): row-major like dnnl_sgemm; bfloat16_t is a uint16_t.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t m, dnnl_dim_t n,
                                               dnnl_dim_t k, float alpha, const uint16_t* a,
                                               dnnl_dim_t lda, const uint16_t* b, dnnl_dim_t ldb,
                                               float beta, float* c, dnnl_dim_t ldc);

const char* gemm_library() { return library_on.load() ? "onednn" : "eigen"; }

bool gemm_library_on() { return library_on.load(std::memory_order_relaxed); }

namespace {

// oneDNN 2.6's sgemm reads its operands in place, without packing them ("nocopy"), where
// 1/m + 1/n >= 0.0038; on CPUs without AVX-512 that is its whole rule (its AVX-512 rule
// also weighs the leading dimensions, its AVX2 one does not). An operand read down its
// stored columns (a transposed, b not) then strides by its leading dimension, and at a
// multiple of 512 floats (2 KB: every power-of-two channel count from 512 up) those rows
// fall into the same few cache sets. On a Zen 3 such products ran at 41-47 GFLOP/s a core,
// against 84-99 with the rows 16 floats further apart (m 64-2048, k 256-4096). Such an
// operand is copied first, with padded rows: the copy costs what oneDNN's packing would.
//
// Only where the operand is read again and again: b once for every 16 or more rows of a (m),
// a transposed once for every 16 or more columns of b (n). A product of one to a few rows
// (a served request's dense layer: m = 1) reads b once whatever its layout, and the copy
// would cost it twice the product: a Zen 3 took 816 us over CNN fc1's 3136 x 1024 weights
// at m = 1 with the copy, 288 without; at m = 16, 1.9 ms with it, 3.6 without.
constexpr int64_t min_reuse_for_padding = 16;

bool reads_in_place(int64_t m, int64_t n) {
  return !cpu_has_avx512_core() && 1.0 / double(m) + 1.0 / double(n) >= 0.0038;
}

// Whether an operand read `reuse` times (m for b, n for a) is copied into padded rows.
bool pads_rows(int64_t m, int64_t n, int64_t reuse) {
  switch (padding.load(std::memory_order_relaxed)) {
    case row_padding::always:
      return true;
    case row_padding::never:
      return false;
    case row_padding::automatic:
      break;
  }
  return reuse >= min_reuse_for_padding && reads_in_place(m, n);
}

bool conflicting_rows(int64_t ld) { return ld % 512 == 0; }

// rows x cols of `from` (rows ld apart) into `to`, rows a padded distance apart;
// returns that distance.
int64_t copy_padded(const float* from, int64_t ld, int64_t rows, int64_t cols,
                    std::vector<float>& to) {
  int64_t padded = (cols + 15) / 16 * 16;
  if (padded % 256 == 0) padded += 16;
  to.resize(static_cast<size_t>(rows * padded));
  for (int64_t r = 0; r < rows; ++r)
    std::copy(from + r * ld, from + r * ld + cols, to.data() + r * padded);
  return padded;
}

}  // namespace

bool library_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (!library_on.load(std::memory_order_relaxed)) return false;
  use_one_openmp_thread();
  if (m > 0 && n > 0 && k > 0) {
    thread_local std::vector<float> padded_a, padded_b;
    if (ta && conflicting_rows(lda) && pads_rows(m, n, n)) {  // a is stored k x m
      lda = copy_padded(a, lda, k, m, padded_a);
      a = padded_a.data();
    }
    if (!tb && conflicting_rows(ldb) && pads_rows(m, n, m)) {  // b is stored k x n
      ldb = copy_padded(b, ldb, k, n, padded_b);
      b = padded_b.data();
    }
  }
  dnnl_status_t status = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb,
                                    accumulate ? 1.0f : 0.0f, c, ldc);
  if (status != dnnl_success)
    fail(error_code::internal, "matmul",
         "oneDNN sgemm failed (status " + std::to_string(int(status)) + ") for " +
             std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n));
  return true;
}

bool library_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a,
                       int64_t lda, const bfloat16* b, int64_t ldb, float* c, int64_t ldc) {
  if (!library_on.load(std::memory_order_relaxed)) return false;
  use_one_openmp_thread();
  dnnl_status_t status = dnnl_gemm_bf16bf16f32(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f,
                                               &a->bits, lda, &b->bits, ldb, 0.0f, c, ldc);
  // A CPU without AVX-512: oneDNN has no bfloat16 GEMM there, the caller converts.
  if (status == dnnl_unimplemented) return false;
  if (status != dnnl_success)
    fail(error_code::internal, "matmul",
         "oneDNN gemm_bf16bf16f32 failed (status " + std::to_string(int(status)) + ") for " +
             std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n));
  return true;
}

#else

const char* gemm_library() { return "eigen"; }

bool gemm_library_on() { return false; }

bool library_sgemm(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                   int64_t, float*, int64_t, bool) {
  return false;
}

bool library_gemm_bf16(bool, bool, int64_t, int64_t, int64_t, const bfloat16*, int64_t,
                       const bfloat16*, int64_t, float*, int64_t) {
  return false;
}

#endif

}  // namespace actorflow::cpu
