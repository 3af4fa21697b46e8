// bfloat16: the upper half of an IEEE float32 (1 sign, 8 exponent, 7 fraction bits).
//
// Semantics follow TensorFlow's tf.bfloat16 (Eigen::bfloat16; checked bit for bit
// against TensorFlow 2.21's tf.cast on random and edge floats, see tests/test_bfloat16.cpp):
// float32 -> bfloat16 rounds to nearest, ties to even; every NaN becomes the quiet
// NaN 0x7fc0 (sign dropped, as TensorFlow does); infinities and -0 are kept; the
// largest floats round to infinity; denormals round like any other value (no flush
// to zero). bfloat16 -> float32 is exact.
//
// Where we differ from TensorFlow: actorflow has no arithmetic on bfloat16 beyond
// cast, matmul and the conv2d family: other ops reject it with "has no bfloat16
// kernel" (cast to float32 around them, as mixed precision does).
#pragma once
#include <cstdint>
#include <cstring>

#include "core/export.hpp"

namespace actorflow {

/// The storage type of dtype::bfloat16: its bits, nothing else (no arithmetic).
struct bfloat16 {
  uint16_t bits = 0;
  friend bool operator==(bfloat16 a, bfloat16 b) { return a.bits == b.bits; }
};
static_assert(sizeof(bfloat16) == 2);

/// The quiet NaN every float32 NaN converts to.
inline constexpr uint16_t bfloat16_nan_bits = 0x7fc0;

/// float32 -> bfloat16, round to nearest even (see the header comment).
inline bfloat16 to_bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{bfloat16_nan_bits};
  // Adding 0x7fff plus the lowest kept bit carries into the kept bits exactly
  // when the dropped half is above one half, or equal with the kept bits odd.
  u += 0x7fffu + ((u >> 16) & 1u);
  return bfloat16{static_cast<uint16_t>(u >> 16)};
}

/// bfloat16 -> float32, exact.
inline float to_float(bfloat16 b) {
  const uint32_t u = uint32_t{b.bits} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// out[i] = to_bfloat16(in[i]) for i < n: AVX512_BF16's vcvtne2ps2bf16 where the
/// CPU has it (chosen at run time), the scalar rule otherwise; the same bits either way.
ACTORFLOW_API void float_to_bfloat16(const float* in, bfloat16* out, int64_t n);
/// out[i] = to_float(in[i]) for i < n.
ACTORFLOW_API void bfloat16_to_float(const bfloat16* in, float* out, int64_t n);
/// Whether float_to_bfloat16 uses the AVX512_BF16 instruction on this CPU.
ACTORFLOW_API bool bfloat16_hardware_conversion();

}  // namespace actorflow
