#include "core/bfloat16.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ACTORFLOW_BF16_X86 1
#endif

namespace actorflow {

namespace {

void float_to_bfloat16_scalar(const float* in, bfloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_bfloat16(in[i]);
}

#if defined(ACTORFLOW_BF16_X86)
// Compiled for AVX512_BF16 whatever the build's -march, and called only where the CPU has it.
// vcvtne2ps2bf16 rounds to nearest even like to_bfloat16, but it reads denormal inputs as zero
// and keeps NaN payloads; those lanes (rare: fpclass finds them without a branch per lane) are
// redone by the scalar rule, so both paths give the same bits.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16"))) void float_to_bfloat16_avx512(
    const float* in, bfloat16* out, int64_t n) {
  constexpr int special = 0x01 | 0x80 | 0x20;  // quiet NaN, signalling NaN, denormal
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(in + i);
    const __m512 hi = _mm512_loadu_ps(in + i + 16);
    // The second operand fills the lower 16 results.
    const __m512bh packed = _mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512(reinterpret_cast<void*>(out + i), reinterpret_cast<__m512i>(packed));
    const uint32_t fix = uint32_t(_mm512_fpclass_ps_mask(lo, special)) |
                         (uint32_t(_mm512_fpclass_ps_mask(hi, special)) << 16);
    for (uint32_t m = fix; m; m &= m - 1) {
      const int64_t j = i + __builtin_ctz(m);
      out[j] = to_bfloat16(in[j]);
    }
  }
  float_to_bfloat16_scalar(in + i, out + i, n - i);
}

bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}
#endif

}  // namespace

bool bfloat16_hardware_conversion() {
#if defined(ACTORFLOW_BF16_X86)
  return cpu_has_avx512_bf16();
#else
  return false;
#endif
}

void float_to_bfloat16(const float* in, bfloat16* out, int64_t n) {
#if defined(ACTORFLOW_BF16_X86)
  if (cpu_has_avx512_bf16()) return float_to_bfloat16_avx512(in, out, n);
#endif
  float_to_bfloat16_scalar(in, out, n);
}

void bfloat16_to_float(const bfloat16* in, float* out, int64_t n) {
  // A shift per element: the compiler vectorizes this loop.
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

}  // namespace actorflow
