// The matrix products behind conv2d and its backprops.
//
// C[m, n] (+)= A(m x kn) * B[kn, n], with B and C row-major and A read through
// strides (A(i, k) = a[i * a_rs + k * a_ks]) so that both a patch matrix and its
// transpose can be used in place. The conv shapes are tall and narrow (n is the
// channel count, 32 or 64 in the benchmark CNN), where B's rows are already a
// packed panel: with AVX-512 a register-tiled kernel that broadcasts A and
// streams B needs no packing and runs about 1.3-1.4x faster than Eigen's
// general GEMM on these shapes. Other builds use Eigen.
#pragma once
#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace actorflow::conv_detail {

#if defined(__AVX512F__)

template <class T>
struct simd;

template <>
struct simd<float> {
  using reg = __m512;
  static constexpr int width = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float v) { return _mm512_set1_ps(v); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg load_masked(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store_masked(float* p, reg v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
};

template <>
struct simd<double> {
  using reg = __m512d;
  static constexpr int width = 8;
  static reg zero() { return _mm512_setzero_pd(); }
  static reg set1(double v) { return _mm512_set1_pd(v); }
  static reg load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, reg v) { _mm512_storeu_pd(p, v); }
  static reg load_masked(const double* p, __mmask16 m) {
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>(m), p);
  }
  static void store_masked(double* p, reg v, __mmask16 m) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>(m), v);
  }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_pd(a, b, c); }
};

// One MR x (NV vectors) tile of C, its accumulators in registers for the whole
// k loop. With MASKED, `last` masks the tile's last vector (columns past n).
template <class T, int MR, int NV, bool MASKED, bool ACCUMULATE>
inline void gemm_tile(int64_t kn, const T* a, int64_t a_rs, int64_t a_ks, const T* b, int64_t ldb,
                      T* c, int64_t ldc, __mmask16 last) {
  using S = simd<T>;
  using reg = typename S::reg;
  auto load = [&](const T* p, int j) {
    if constexpr (MASKED) {
      if (j == NV - 1) return S::load_masked(p, last);
    }
    return S::load(p);
  };
  reg acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      acc[i][j] = ACCUMULATE ? load(c + i * ldc + j * S::width, j) : S::zero();
  for (int64_t k = 0; k < kn; ++k) {
    reg bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = load(b + k * ldb + j * S::width, j);
    const T* ak = a + k * a_ks;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const reg av = S::set1(ak[i * a_rs]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = S::fmadd(av, bv[j], acc[i][j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      T* p = c + i * ldc + j * S::width;
      if (MASKED && j == NV - 1)
        S::store_masked(p, acc[i][j], last);
      else
        S::store(p, acc[i][j]);
    }
}

// Runs the tile with MR = rows (1..MR) chosen at run time.
template <class T, int NV, int MR, bool MASKED, bool ACCUMULATE>
inline void gemm_tile_rows(int64_t rows, int64_t kn, const T* a, int64_t a_rs, int64_t a_ks,
                           const T* b, int64_t ldb, T* c, int64_t ldc, __mmask16 last) {
  if constexpr (MR > 1) {
    if (rows < MR) {
      gemm_tile_rows<T, NV, MR - 1, MASKED, ACCUMULATE>(rows, kn, a, a_rs, a_ks, b, ldb, c, ldc,
                                                        last);
      return;
    }
  }
  gemm_tile<T, MR, NV, MASKED, ACCUMULATE>(kn, a, a_rs, a_ks, b, ldb, c, ldc, last);
}

// All rows for one block of NV vectors of columns, MR rows at a time
// (MR * NV = 24 accumulators, leaving registers for B and the broadcast).
template <class T, int NV, bool MASKED, bool ACCUMULATE>
void gemm_column_block(int64_t m, int64_t kn, const T* a, int64_t a_rs, int64_t a_ks, const T* b,
                       int64_t ldb, T* c, int64_t ldc, __mmask16 last) {
  constexpr int MR = 24 / NV;
  int64_t i = 0;
  for (; i + MR <= m; i += MR)
    gemm_tile<T, MR, NV, MASKED, ACCUMULATE>(kn, a + i * a_rs, a_rs, a_ks, b, ldb, c + i * ldc, ldc,
                                             last);
  if (i < m)
    gemm_tile_rows<T, NV, MR - 1, MASKED, ACCUMULATE>(m - i, kn, a + i * a_rs, a_rs, a_ks, b, ldb,
                                                      c + i * ldc, ldc, last);
}

template <class T, bool ACCUMULATE>
void gemm_blocks(int64_t m, int64_t n, int64_t kn, const T* a, int64_t a_rs, int64_t a_ks,
                 const T* b, int64_t ldb, T* c, int64_t ldc) {
  constexpr int64_t w = simd<T>::width;
  int64_t j = 0;
  for (; j + 4 * w <= n; j += 4 * w)
    gemm_column_block<T, 4, false, ACCUMULATE>(m, kn, a, a_rs, a_ks, b + j, ldb, c + j, ldc, 0);
  const int64_t left = n - j;
  if (left == 0) return;
  const int nv = static_cast<int>((left + w - 1) / w);
  const __mmask16 last = static_cast<__mmask16>((1u << (left - (nv - 1) * w)) - 1);
  b += j;
  c += j;
  switch (nv) {
    case 4:
      gemm_column_block<T, 4, true, ACCUMULATE>(m, kn, a, a_rs, a_ks, b, ldb, c, ldc, last);
      break;
    case 3:
      gemm_column_block<T, 3, true, ACCUMULATE>(m, kn, a, a_rs, a_ks, b, ldb, c, ldc, last);
      break;
    case 2:
      gemm_column_block<T, 2, true, ACCUMULATE>(m, kn, a, a_rs, a_ks, b, ldb, c, ldc, last);
      break;
    default:
      gemm_column_block<T, 1, true, ACCUMULATE>(m, kn, a, a_rs, a_ks, b, ldb, c, ldc, last);
  }
}

#endif

template <class T>
void gemm_rows(int64_t m, int64_t n, int64_t kn, const T* a, int64_t a_rs, int64_t a_ks, const T* b,
               int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
#if defined(__AVX512F__)
  if (accumulate)
    gemm_blocks<T, true>(m, n, kn, a, a_rs, a_ks, b, ldb, c, ldc);
  else
    gemm_blocks<T, false>(m, n, kn, a, a_rs, a_ks, b, ldb, c, ldc);
#else
  using row_major = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using col_major = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  using stride = Eigen::OuterStride<>;
  Eigen::Map<row_major, 0, stride> cm(c, m, n, stride(ldc));
  Eigen::Map<const row_major, 0, stride> bm(b, kn, n, stride(ldb));
  if (!accumulate) cm.setZero();
  if (kn <= 0) return;
  if (a_ks == 1)
    cm.noalias() += Eigen::Map<const row_major, 0, stride>(a, m, kn, stride(a_rs)) * bm;
  else  // a_rs == 1: A is the transpose of a row-major [kn, m] matrix
    cm.noalias() += Eigen::Map<const col_major, 0, stride>(a, m, kn, stride(a_ks)) * bm;
#endif
}

}  // namespace actorflow::conv_detail
