// The library behind float GEMM on the CPU (cmake/gemm_library.cmake).
//
// Kernels split a product into blocks across the CPU device's TBB arena and
// compute each block on one thread; library_sgemm is that one-thread block
// product. With oneDNN (Debian's libdnnl, OpenMP inside), the calling thread
// is told to use one OpenMP thread, so the library never starts a second
// thread pool beside TBB's: the cores are TBB's alone.
#pragma once
#include <cstdint>

#include "core/bfloat16.hpp"

namespace actorflow::cpu {

/// "onednn" or "eigen": the library library_sgemm calls (eigen: none, or off).
const char* gemm_library();

/// Off: library_sgemm declines and Eigen computes every product. On by
/// default; the benchmarks turn it off to measure both in one run, and
/// ACTORFLOW_CPU_GEMM=eigen in the environment starts with it off. Change it
/// only while no kernel runs (a kernel plans its products by it).
void use_gemm_library(bool on);

/// c (m x n, row stride ldc) = op(a) x op(b), row-major, op a transpose where
/// ta/tb, on the calling thread; with accumulate c += op(a) x op(b). Returns
/// false (and computes nothing) where no library was built in or it is off:
/// the caller computes the product itself.
bool library_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate = false);

/// c (m x n float32, row stride ldc) = op(a) x op(b) for bfloat16 a and b, products summed
/// in float32, on the calling thread: oneDNN's gemm_bf16bf16f32 (AMX or AVX512_BF16 where
/// the CPU has them). Returns false (and computes nothing) where library_sgemm would, or
/// where oneDNN has no bfloat16 GEMM for this CPU: the caller computes the product itself.
bool library_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a,
                       int64_t lda, const bfloat16* b, int64_t ldb, float* c, int64_t ldc);

/// How library_sgemm treats an operand oneDNN would read in place with rows a
/// multiple of 2 KB apart (gemm_library.cpp says why that is slow): copied into
/// padded rows first where oneDNN's rule for this CPU reads in place and the
/// operand is read for 16 or more rows (b) or columns (a) of the product
/// (automatic, the default), always (tests: that path on any CPU), or never
/// (benchmarks: the library as it is). Change it only while no kernel runs.
enum class row_padding { automatic, always, never };
void set_row_padding(row_padding padding);

/// Whether the CPU has AVX-512 as oneDNN requires for its AVX-512 kernels (F, BW, VL and
/// DQ): where not, oneDNN runs its AVX2 ones, whose choices and speeds differ.
bool cpu_has_avx512_core();

/// Whether library_sgemm computes products (a library is built in and on).
bool gemm_library_on();

}  // namespace actorflow::cpu
