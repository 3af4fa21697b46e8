#include "ops/array_util.hpp"

#include <algorithm>
#include <cstring>
#ifdef __AVX__
#include <immintrin.h>
#endif

#include "devices/cpu/parallel.hpp"

namespace actorflow::detail {

int64_t known_product(const shape& s) {
  for (auto d : s.dims())
    if (d < 0) return -1;
  return s.num_elements();  // throws on overflow
}

namespace {

struct layout {
  std::vector<int64_t> dims, src, dst;  // extents and strides per dim
  int rank() const { return static_cast<int>(dims.size()); }
};

// Drops size-1 dims and merges neighbours that are contiguous on both sides, so a
// slice of rows or a copy of a whole block becomes one long row.
layout simplify(const std::vector<int64_t>& dims, const std::vector<int64_t>& ss,
                const std::vector<int64_t>& ds) {
  layout l;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1) continue;
    if (!l.dims.empty() && l.src.back() == ss[k] * dims[k] && l.dst.back() == ds[k] * dims[k]) {
      l.dims.back() *= dims[k];
      l.src.back() = ss[k];
      l.dst.back() = ds[k];
    } else {
      l.dims.push_back(dims[k]);
      l.src.push_back(ss[k]);
      l.dst.push_back(ds[k]);
    }
  }
  return l;
}

template <class U>
void copy_row(const U* s, U* d, int64_t n, int64_t ss, int64_t ds) {
  if (ss == 1 && ds == 1) {
    std::memcpy(d, s, static_cast<size_t>(n) * sizeof(U));
  } else if (ss == 0 && ds == 1) {
    std::fill_n(d, n, *s);
  } else if (ds == 1) {
    for (int64_t i = 0; i < n; ++i) d[i] = s[i * ss];
  } else {
    for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
  }
}

// Walks the rows (all dims but the last) with an odometer: one division per chunk.
template <class U>
void copy_rows(const U* src, U* dst, const layout& l) {
  int n = l.rank();
  int64_t inner = l.dims[n - 1];
  int64_t rows = 1;
  for (int k = 0; k < n - 1; ++k) rows *= l.dims[k];
  int64_t grain = std::max<int64_t>(1, parallel_grain / inner);
  parallel_for(rows, grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(static_cast<size_t>(std::max(n - 1, 0)));
    int64_t so = 0, doff = 0, r = b;
    for (int k = n - 2; k >= 0; --k) {
      idx[k] = r % l.dims[k];
      r /= l.dims[k];
      so += idx[k] * l.src[k];
      doff += idx[k] * l.dst[k];
    }
    for (int64_t row = b; row < e; ++row) {
      copy_row(src + so, dst + doff, inner, l.src[n - 1], l.dst[n - 1]);
      for (int k = n - 2; k >= 0; --k) {
        so += l.src[k];
        doff += l.dst[k];
        if (++idx[k] < l.dims[k]) break;
        so -= l.src[k] * l.dims[k];
        doff -= l.dst[k] * l.dims[k];
        idx[k] = 0;
      }
    }
  });
}

// Register transposes of small blocks: row k of the source block starts at
// s + k*ss, row k of the destination block at d + k*ds. Shuffles move bits only,
// so one kernel per element size serves every dtype.
#ifdef __AVX__
inline void transpose_block(const uint32_t* s, int64_t ss, uint32_t* d, int64_t ds) {
  __m256 r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(s + k * ss));
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  __m256 o[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                 _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                 _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                 _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
  for (int k = 0; k < 8; ++k) _mm256_storeu_ps(reinterpret_cast<float*>(d + k * ds), o[k]);
}

inline void transpose_block(const uint64_t* s, int64_t ss, uint64_t* d, int64_t ds) {
  auto ld = [&](int k) { return _mm256_loadu_pd(reinterpret_cast<const double*>(s + k * ss)); };
  __m256d r0 = ld(0), r1 = ld(1), r2 = ld(2), r3 = ld(3);
  __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
  __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  auto st = [&](int k, __m256d v) { _mm256_storeu_pd(reinterpret_cast<double*>(d + k * ds), v); };
  st(0, _mm256_permute2f128_pd(t0, t2, 0x20));
  st(1, _mm256_permute2f128_pd(t1, t3, 0x20));
  st(2, _mm256_permute2f128_pd(t0, t2, 0x31));
  st(3, _mm256_permute2f128_pd(t1, t3, 0x31));
}

template <class U>
constexpr int64_t block_size = sizeof(U) == 4   ? 8
                               : sizeof(U) == 8 ? 4
                                                : 0;
#else
template <class U>
constexpr int64_t block_size = 0;
#endif

// d[i*dsa + j] = s[i + j*ssl] for i in [i0, i1), j in [j0, j1).
template <class U>
void transpose_tile(const U* s, U* d, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t dsa,
                    int64_t ssl) {
  auto scalar = [&](int64_t ib, int64_t ie, int64_t jb, int64_t je) {
    for (int64_t i = ib; i < ie; ++i)
      for (int64_t j = jb; j < je; ++j) d[i * dsa + j] = s[i + j * ssl];
  };
  constexpr int64_t B = block_size<U>;
  if constexpr (B > 0) {
    int64_t ie = i0 + (i1 - i0) / B * B, je = j0 + (j1 - j0) / B * B;
    for (int64_t j = j0; j < je; j += B)
      for (int64_t i = i0; i < ie; i += B)
        transpose_block(s + i + j * ssl, ssl, d + i * dsa + j, dsa);
    scalar(ie, i1, j0, j1);
    scalar(i0, ie, je, j1);
  } else {
    scalar(i0, i1, j0, j1);
  }
}

// A transpose-like copy: the destination is contiguous along the last dim and the
// source along dim `a`. Works in tiles so both sides' lines stay in cache, with
// register transposes inside (3x faster than scalar tiles for float32 here);
// scalar tiles are 64 x one destination line (square 32x32 ones measured 2-3x
// slower at power-of-two strides: cache-set conflicts).
template <class U>
void copy_tiled(const U* src, U* dst, const layout& l, int a) {
  constexpr int64_t tile_a = 64;
  constexpr int64_t tile_l = block_size < U >> 0 ? 64 : std::max<int64_t>(16, 64 / sizeof(U));
  int last = l.rank() - 1;
  int64_t A = l.dims[a], L = l.dims[last];
  int64_t dsa = l.dst[a], ssl = l.src[last];
  std::vector<int64_t> od, oss, ods;
  for (int k = 0; k < last; ++k)
    if (k != a) {
      od.push_back(l.dims[k]);
      oss.push_back(l.src[k]);
      ods.push_back(l.dst[k]);
    }
  int64_t outer = 1;
  for (auto d : od) outer *= d;
  int64_t ta = (A + tile_a - 1) / tile_a, tl = (L + tile_l - 1) / tile_l;
  int64_t grain = std::max<int64_t>(1, parallel_grain / (tile_a * tile_l));
  parallel_for(outer * ta * tl, grain, [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      int64_t jl = u % tl, rest = u / tl;
      int64_t ia = rest % ta, o = rest / ta;
      int64_t so = 0, doff = 0;
      for (size_t k = od.size(); k-- > 0;) {
        int64_t i = o % od[k];
        o /= od[k];
        so += i * oss[k];
        doff += i * ods[k];
      }
      transpose_tile(src + so, dst + doff, ia * tile_a, std::min(A, (ia + 1) * tile_a), jl * tile_l,
                     std::min(L, (jl + 1) * tile_l), dsa, ssl);
    }
  });
}

}  // namespace

void strided_copy(size_t elem_size, const void* src, std::vector<int64_t> src_strides, void* dst,
                  std::vector<int64_t> dst_strides, std::vector<int64_t> dims) {
  for (auto d : dims)
    if (d == 0) return;
  layout l = simplify(dims, src_strides, dst_strides);
  visit_elem_size(elem_size, [&](auto tag) {
    using U = decltype(tag);
    const U* s = static_cast<const U*>(src);
    U* d = static_cast<U*>(dst);
    int n = l.rank();
    if (n == 0) {
      *d = *s;
      return;
    }
    if (n >= 2 && l.dst[n - 1] == 1 && l.src[n - 1] != 1 && l.dims[n - 1] >= 8) {
      for (int a = 0; a < n - 1; ++a)
        if (l.src[a] == 1 && l.dims[a] >= 8) return copy_tiled(s, d, l, a);
    }
    copy_rows(s, d, l);
  });
}

void fill_value(tensor& t, double value, const std::string& op, const char* what) {
  if (t.type() == dtype::bfloat16) {  // through float32, as TensorFlow converts a double
    const bfloat16 v = to_bfloat16(static_cast<float>(value));
    bfloat16* p = t.mutable_data<bfloat16>();
    parallel_for(t.num_elements(), [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
    return;
  }
  visit_dtype(t.type(), [&](auto tag) {
    using T = decltype(tag);
    T v = cast_value<T>(value, op, what);
    T* p = t.mutable_data<T>();
    parallel_for(t.num_elements(), [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
  });
}

tensor broadcast_tensor(const tensor& x, const shape& to) {
  if (x.dims() == to) return x;
  tensor out(x.type(), to);
  int lead = to.rank() - x.rank();
  auto xs = dense_strides(x.dims().dims());
  std::vector<int64_t> ss(static_cast<size_t>(to.rank()), 0);
  for (int k = 0; k < x.rank(); ++k) ss[lead + k] = x.dims()[k] == 1 ? 0 : xs[k];
  strided_copy(dtype_size(x.type()), x.raw_data(), ss, out.raw_mutable_data(),
               dense_strides(to.dims()), to.dims());
  return out;
}

void check_index_type(dtype t, const std::string& op) {
  if (t != dtype::int32 && t != dtype::int64)
    fail(op, std::string("indices must be int32 or int64, got ") + dtype_name(t));
}

shape gathered_rows_shape(const shape& indices, const shape& var) {
  std::vector<int64_t> dims(indices.dims().begin(), indices.dims().end());
  dims.insert(dims.end(), var.dims().begin() + 1, var.dims().end());
  return shape(dims);
}

int64_t check_array_writes(const std::vector<int64_t>& idx, int64_t capacity, bool dynamic,
                           const bool* was, const std::function<void(const std::string&)>& fail) {
  int64_t highest = -1;
  for (int64_t i : idx) {
    if (i < 0) fail("write of the negative index " + std::to_string(i));
    if (i >= capacity && !dynamic)
      fail("write past the end: index " + std::to_string(i) + ", size " + std::to_string(capacity) +
           " (the array is not dynamic_size)");
    if (i < capacity && was[i]) fail("index " + std::to_string(i) + " was written twice");
    highest = std::max(highest, i);
  }
  auto sorted = idx;
  std::sort(sorted.begin(), sorted.end());
  if (auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end())
    fail("index " + std::to_string(*twice) + " was written twice");
  return highest;
}

std::vector<int64_t> checked_indices(const kernel_context& ctx, const tensor& indices, int axis,
                                     int64_t d, const std::string& where) {
  return checked_indices(indices, axis, d, where, ctx.op);
}

std::vector<int64_t> checked_indices(const tensor& indices, int axis, int64_t d,
                                     const std::string& where, const std::string& fail_as) {
  int64_t n = indices.num_elements();
  std::vector<int64_t> idx(static_cast<size_t>(n));
  visit_index(indices.type(), [&](auto tag) {
    using I = decltype(tag);
    const I* p = indices.data<I>();
    for (int64_t j = 0; j < n; ++j) {
      if (p[j] < 0 || p[j] >= d)
        fail(fail_as, "index " + std::to_string(p[j]) + " (at position " + std::to_string(j) +
                          ") is out of range for axis " + std::to_string(axis) + " of size " +
                          std::to_string(d) + " in " + where);
      idx[static_cast<size_t>(j)] = p[j];
    }
  });
  return idx;
}

}  // namespace actorflow::detail
