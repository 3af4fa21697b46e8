#include "devices/cpu/gemm_library.hpp"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "core/error.hpp"
#include "devices/cpu/onednn_threads.hpp"

#if defined(ACTORFLOW_HAS_ONEDNN)
#include <oneapi/dnnl/dnnl.h>

#include <string>
#endif

namespace actorflow::cpu {

namespace {

bool library_on_at_start() {
  const char* choice = std::getenv("ACTORFLOW_CPU_GEMM");
  return !(choice && std::string_view(choice) == "eigen");
}

std::atomic<bool> library_on{library_on_at_start()};

}  // namespace

void use_gemm_library(bool on) { library_on.store(on, std::memory_order_relaxed); }

#if defined(ACTORFLOW_HAS_ONEDNN)

// Exported by libdnnl but declared only in oneDNN's own sources (its tests and Intel's
// TensorFlow extension call it so): row-major like dnnl_sgemm; bfloat16_t is a uint16_t.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t m, dnnl_dim_t n,
                                               dnnl_dim_t k, float alpha, const uint16_t* a,
                                               dnnl_dim_t lda, const uint16_t* b, dnnl_dim_t ldb,
                                               float beta, float* c, dnnl_dim_t ldc);

const char* gemm_library() { return library_on.load() ? "onednn" : "eigen"; }

bool gemm_library_on() { return library_on.load(std::memory_order_relaxed); }

bool library_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (!library_on.load(std::memory_order_relaxed)) return false;
  use_one_openmp_thread();
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
