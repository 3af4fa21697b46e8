// conv2d and its backprops: im2col + GEMM over chunks of output pixels.
//
// The im2col matrix has one row per output pixel (n, oy, ox) and one column per
// filter tap (ky, kx, c), so the filter [KH,KW,C,K] is already the [L, K]
// right-hand side (L = KH*KW*C) and the output [N,OH,OW,K] the [P, K] result
// (P = N*OH*OW). Rows are materialized a chunk at a time into a per-thread
// scratch buffer sized to stay in cache; TBB splits the rows (or, for the
// input gradient whose col2im scatter overlaps within an image, the images)
// across the arena the kernel runs in. Each chunk's GEMM (conv_gemm.hpp) is
// single-threaded.
#include "ops/conv.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "devices/cpu/conv_library.hpp"
#include "devices/cpu/gemm_library.hpp"
#include "devices/cpu/parallel.hpp"
#include "ops/conv_gemm.hpp"
#include "ops/conv_winograd.hpp"
#include "ops/epilogue.hpp"
#include "ops/geometry/conv_window.hpp"
#include "ops/linalg.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

using conv_detail::gemm_rows;
using conv_detail::geometry;

// Size of one chunk's im2col buffer: about half of a core's L2, so the GEMM
// reads back what im2col just wrote from cache.
constexpr int64_t chunk_bytes = 512 * 1024;
constexpr int64_t min_chunk_rows = 32;
// Multiply-adds below which a kernel runs on the calling thread.
constexpr int64_t parallel_macs = int64_t{1} << 20;

int64_t chunk_rows(int64_t row_len, size_t elem) {
  int64_t bytes = std::max<int64_t>(row_len, 1) * static_cast<int64_t>(elem);
  return std::max(min_chunk_rows, chunk_bytes / bytes);
}

// The tiled kernel (conv_gemm.hpp) streams the filter matrix once per tile of
// rows, which pays while it stays in cache (the 32 and 64 channel layers). A
// wider layer (AlexNet's and VGG's, Overfeat's 1024 channels) goes to the CPU
// GEMM library, which packs it into cache-sized panels, in chunks of rows large
// enough to amortize the packing.
constexpr int64_t wide_filter_bytes = int64_t{1} << 20;
constexpr int64_t wide_chunk_rows = 256;

template <class T>
bool is_wide(int64_t len, int64_t k) {
  return std::is_same_v<T, float> && cpu::gemm_library_on() &&
         len * k * int64_t(sizeof(T)) > wide_filter_bytes;
}

int64_t chunk_rows(int64_t row_len, size_t elem, bool wide) {
  return wide ? std::max(wide_chunk_rows, chunk_rows(row_len, elem)) : chunk_rows(row_len, elem);
}

// Whether a float chunk's product goes to the GEMM library: a wide filter's
// always; any other where the tiled kernel is not built (it needs AVX-512),
// since gemm_rows is then Eigen's general GEMM, which the library outruns
// (on a Zen 3, ResNet-50's first layer's filter gradient 9.8 -> 6.5 ms, its
// stage 2 downsampling's 13.5 -> 8-10 ms, in traced steps of alternating
// image_models runs).
template <class T>
bool library_chunks(bool wide) {
#if defined(__AVX512F__)
  constexpr bool tiled_kernel = true;
#else
  constexpr bool tiled_kernel = false;
#endif
  return std::is_same_v<T, float> && cpu::gemm_library_on() && (wide || !tiled_kernel);
}

// gemm_rows (c [+]= a x b, a read through strides), through the library where
// library_chunks.
template <class T>
void chunk_gemm(bool library, int64_t m, int64_t n, int64_t kn, const T* a, int64_t a_rs,
                int64_t a_ks, const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    const bool ta = a_ks != 1;  // then a_rs == 1: a is a row-major [kn, m] read transposed
    if (library && m > 0 && n > 0 &&
        cpu::library_sgemm(ta, false, m, n, kn, a, ta ? a_ks : a_rs, b, ldb, c, ldc, accumulate))
      return;
  }
  gemm_rows(m, n, kn, a, a_rs, a_ks, b, ldb, c, ldc, accumulate);
}

// A per-thread buffer that persists across calls, so chunks do not allocate
// (and page-fault) every time. Only used inside one task body, which makes no
// TBB call that could run another body on this thread meanwhile.
template <class T>
T* scratch(int64_t n) {
  thread_local std::vector<T> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// --- validation shared by the shape functions and the kernels ---

struct conv_dims {
  geometry g;
  int64_t k;  // output channels
};

conv_dims conv_geometry(const std::string& op, const shape& in, const shape& filter,
                        const attr_map& attrs) {
  if (in.rank() != 4) fail(op, "input must be rank 4 [N,H,W,C], got " + in.to_string());
  if (filter.rank() != 4) fail(op, "filter must be rank 4 [KH,KW,C,K], got " + filter.to_string());
  if (in[3] >= 0 && filter[2] >= 0 && in[3] != filter[2])
    fail(op, "input channels differ from the filter's: input " + in.to_string() + ", filter " +
                 filter.to_string());
  if (filter[0] == 0 || filter[1] == 0)
    fail(op, "filter spatial dims must be positive, got " + filter.to_string());
  auto g = conv_detail::make_geometry(
      in, filter[0], filter[1], attrs, "strides", op,
      "filter (" + std::to_string(filter[0]) + "," + std::to_string(filter[1]) + ")");
  g.c = in[3] >= 0 ? in[3] : filter[2];
  return {g, filter[3]};
}

shape conv_output_shape(const conv_dims& d) { return shape{d.g.n, d.g.oh, d.g.ow, d.k}; }

void check_float_pair(const std::string& op, dtype a, dtype b, const char* an, const char* bn) {
  if (!is_floating(a))
    fail(op, std::string("expects float32, float64 or bfloat16, got ") + dtype_name(a));
  if (a != b)
    fail(op, std::string(an) + " and " + bn + " dtypes differ: " + dtype_name(a) + " vs " +
                 dtype_name(b));
}

// out_backprop must have the forward output's shape (unknown dims match anything).
void check_out_backprop(const std::string& op, const conv_dims& d, const shape& dy) {
  shape expect = conv_output_shape(d);
  if (dy.rank() != 4 || !dy.compatible_with(expect))
    fail(op, "out_backprop shape " + dy.to_string() + " does not match the conv2d output shape " +
                 expect.to_string());
}

// --- im2col / col2im over rows [r0, r1) of the P x L patch matrix ---

// Walks rows [r0, r1) of the patch matrix: for each filter row i of output
// pixel r calls f(r, i, off, lo, hi) when the filter row lies inside the input
// (taps [lo, hi) of its KW*C values are valid, starting at input offset off;
// off - lo may point before the image) and f(r, i, -1, 0, 0) when it does not.
template <class F>
void for_each_patch_row(const geometry& geom, int64_t r0, int64_t r1, F f) {
  const geometry g = geom;  // a local copy stays in registers across f's stores
  const int64_t pix = g.oh * g.ow;
  int64_t n = r0 / pix, rem = r0 % pix, y = rem / g.ow, x = rem % g.ow;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t ih0 = y * g.sh - g.pad_top, iw0 = x * g.sw - g.pad_left;
    const int64_t lo = std::max<int64_t>(0, -iw0) * g.c;
    const int64_t hi = std::min<int64_t>(g.kw, g.w - iw0) * g.c;
    const int64_t image = n * g.h * g.w * g.c;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih = ih0 + i;
      if (ih >= 0 && ih < g.h && hi > lo)
        f(r, i, image + (ih * g.w + iw0) * g.c + lo, lo, hi);
      else
        f(r, i, int64_t{-1}, int64_t{0}, int64_t{0});
    }
    if (++x == g.ow) {
      x = 0;
      if (++y == g.oh) {
        y = 0;
        ++n;
      }
    }
  }
}

// Writes one filter row's KW*C patch values: s[lo, hi) and zeros around them.
template <class T>
inline void patch_segment(T* d, const T* s, int64_t lo, int64_t hi, int64_t seg) {
#if defined(__AVX512F__)
  // Short runs (small C, as in a first layer) in one masked load and store.
  using S = conv_detail::simd<T>;
  if (seg <= S::width) {
    const auto bits = [](int64_t b) { return static_cast<__mmask16>((1u << b) - 1); };
    const __mmask16 valid = static_cast<__mmask16>(bits(hi) & ~bits(lo));
    S::store_masked(d, S::load_masked(s, valid), bits(seg));
    return;
  }
#endif
  for (int64_t j = 0; j < lo; ++j) d[j] = T(0);
  for (int64_t j = lo; j < hi; ++j) d[j] = s[j];
  for (int64_t j = hi; j < seg; ++j) d[j] = T(0);
}

template <class T>
void im2col(const geometry& g, int64_t r0, int64_t r1, const T* in, T* cols) {
  const int64_t seg = g.kw * g.c, row_len = g.kh * seg;
  for_each_patch_row(g, r0, r1, [=](int64_t r, int64_t i, int64_t off, int64_t lo, int64_t hi) {
    T* d = cols + (r - r0) * row_len + i * seg;
    if (off < 0)
      patch_segment<T>(d, in, 0, 0, seg);
    else
      patch_segment<T>(d, in + (off - lo), lo, hi, seg);
  });
}

template <class T>
void col2im_add(const geometry& g, int64_t r0, int64_t r1, const T* cols, T* din) {
  const int64_t seg = g.kw * g.c, row_len = g.kh * seg;
  for_each_patch_row(g, r0, r1, [=](int64_t r, int64_t i, int64_t off, int64_t lo, int64_t hi) {
    if (off < 0) return;
    const T* s = cols + (r - r0) * row_len + i * seg + lo;
    T* d = din + off;
    for (int64_t j = 0; j < hi - lo; ++j) d[j] += s[j];
  });
}

// A 1x1 filter with unit strides needs no patches: the input is the patch matrix.
bool is_pointwise(const geometry& g) { return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1; }

// A float convolution over few rows is one product: of the NHWC operands as
// they are for a 1x1 filter at unit strides, else of the whole patch matrix
// (im2col of every output pixel), run by matmul's GEMM (the CPU library's, in
// blocks planned for the threads) where the library is on. The chunked
// products below plan blocks for the patch matrices' cache footprint instead:
// where that makes fewer than two chunks a thread, threads sit idle (a
// 4x4x512 -> 2048 layer, 256 rows, ran as one block on one thread). A 1x1
// filter at unit strides always; others only then (ResNet-50's stage 3 and 4
// at 112 pixels: its downsampling 1.4-1.9x, stage 4's strided 3x3 forward
// 14.6 -> 10.3 ms): with more chunks, making each chunk's patches while it
// is in cache is faster (stage 2's downsampling: 1.1x). Only filters over
// 1 MB (the library's chunks) besides 1x1 ones; patches above
// max_whole_patches floats keep the chunks, whose memory stays small.
constexpr int64_t max_whole_patches = int64_t{8} << 20;  // 32 MiB

bool whole_product(const geometry& g, int64_t k) {
  if (!cpu::gemm_library_on()) return false;
  if (is_pointwise(g)) return true;
  const int64_t rows = g.n * g.oh * g.ow, len = g.kh * g.kw * g.c;
  const bool wide = is_wide<float>(len, k), one_by_one = g.kh == 1 && g.kw == 1;
  if ((!one_by_one && !wide) || rows * len > max_whole_patches) return false;
  const int64_t threads = std::max(1, tbb::info::default_concurrency());
  return rows < 2 * threads * chunk_rows(len, sizeof(float), wide);
}

int64_t patch_grain(const geometry& g) {
  return std::max<int64_t>(1, parallel_grain / std::max<int64_t>(g.kh * g.kw * g.c, 1));
}

// The whole patch matrix, [N * OH * OW, KH * KW * C].
std::vector<float> whole_patches(const geometry& g, const float* x) {
  const int64_t rows = g.n * g.oh * g.ow, len = g.kh * g.kw * g.c;
  std::vector<float> patches(static_cast<size_t>(rows * len));
  parallel_for(rows, patch_grain(g),
               [&](int64_t b, int64_t e) { im2col(g, b, e, x, patches.data() + b * len); });
  return patches;
}

// dx = the patch matrix's gradient [N * OH * OW, KH * KW * C] summed into the
// input elements each patch read. Rows split freely where windows never
// overlap (no two rows add to one element); elsewhere by images.
void scatter_patches(const geometry& g, const float* grads, float* dx) {
  const int64_t rows = g.n * g.oh * g.ow, len = g.kh * g.kw * g.c, pix = g.oh * g.ow;
  parallel_for(g.n * g.h * g.w * g.c,
               [&](int64_t b, int64_t e) { std::fill(dx + b, dx + e, 0.0f); });
  if (g.kh <= g.sh && g.kw <= g.sw) {
    parallel_for(rows, patch_grain(g),
                 [&](int64_t b, int64_t e) { col2im_add(g, b, e, grads + b * len, dx); });
    return;
  }
  parallel_for(g.n, 1, [&](int64_t b, int64_t e) {
    col2im_add(g, b * pix, e * pix, grads + b * pix * len, dx);
  });
}

// Runs body(begin, end) over [0, n) split by TBB in pieces of about `grain`,
// or inline when the work is small.
template <class F>
void split(int64_t n, int64_t grain, int64_t macs, F&& body) {
  if (n <= 0) return;
  if (macs < parallel_macs || n <= grain) {
    body(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
}

// --- kernels ---

// oneDNN's primitives (devices/cpu/conv_library.hpp), for float32 and
// bfloat16 problems of the shapes where they are faster than the kernels
// below (or than bfloat16's way through them); false: not taken.
template <class T>
bool through_library(cpu::conv_pass pass, const geometry& g, int64_t k, const T* a, const T* b,
                     T* out, const epilogue<T>& ep = {}) {
  const cpu::conv_problem p{g.n,  g.h,  g.w,  g.c,  k,         g.kh,      g.kw,
                            g.sh, g.sw, g.oh, g.ow, g.pad_top, g.pad_left};
  if constexpr (std::is_same_v<T, bfloat16>) {
    return cpu::conv_library_chosen(pass, p) && cpu::library_conv_bf16(pass, p, a, b, out);
  } else if constexpr (std::is_same_v<T, float>) {
    if (!cpu::conv_library_chosen(pass, p)) return false;
    if (ep.empty()) return cpu::library_conv(pass, p, a, b, out);
    return cpu::library_conv(pass, p, a, b, out,
                             [&](float* rows, int64_t count) { ep.apply(rows, count, k, k, 0); });
  } else {
    return false;
  }
}

// A fused op's epilogue (bias, activation) runs over each chunk of rows of y
// right after its product, while the chunk is in cache.
template <class T>
void forward(const geometry& g, int64_t k, const T* x, const T* f, T* y,
             const epilogue<T>& ep = {}) {
  const int64_t rows = g.n * g.oh * g.ow, len = g.kh * g.kw * g.c;
  if (rows == 0 || k == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (conv_detail::winograd_chosen(g, k)) {
      conv_detail::winograd_forward(g, k, x, f, y);
      if (!ep.empty())
        parallel_for(rows, std::max<int64_t>(1, parallel_grain / k),
                     [&](int64_t b, int64_t e) { ep.apply(y + b * k, e - b, k, k, 0); });
      return;
    }
  }
  if (through_library(cpu::conv_pass::forward, g, k, x, f, y, ep)) return;
  if constexpr (std::is_same_v<T, float>) {
    if (whole_product(g, k)) {
      if (is_pointwise(g)) return gemm(x, f, y, rows, k, len, false, false, ep);
      const auto patches = whole_patches(g, x);
      return gemm(patches.data(), f, y, rows, k, len, false, false, ep);
    }
  }
  const bool wide = is_wide<T>(len, k), library = library_chunks<T>(wide);
  const int64_t step = chunk_rows(len, sizeof(T), wide);
  const bool pointwise = is_pointwise(g);
  // y[rows, k] = patches[rows, len] * f[len, k]
  split(rows, step, rows * len * k, [&](int64_t b, int64_t e) {
    if (pointwise) {
      chunk_gemm(library, e - b, k, len, x + b * len, len, 1, f, k, y + b * k, k, false);
      ep.apply(y + b * k, e - b, k, k, 0);
      return;
    }
    T* cols = scratch<T>(std::min(step, e - b) * len);
    for (int64_t r0 = b; r0 < e; r0 += step) {
      const int64_t r1 = std::min(e, r0 + step);
      im2col(g, r0, r1, x, cols);
      chunk_gemm(library, r1 - r0, k, len, cols, len, 1, f, k, y + r0 * k, k, false);
      ep.apply(y + r0 * k, r1 - r0, k, k, 0);
    }
  });
}

template <class T>
void backprop_input(const geometry& g, int64_t k, const T* f, const T* dy, T* dx) {
  const int64_t rows = g.n * g.oh * g.ow, len = g.kh * g.kw * g.c;
  const int64_t image = g.h * g.w * g.c, pix = g.oh * g.ow;
  if (g.n * image == 0) return;
  if (rows == 0 || k == 0 || len == 0) {
    std::fill(dx, dx + g.n * image, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    if (conv_detail::winograd_chosen(g, k))
      return conv_detail::winograd_backprop_input(g, k, f, dy, dx);
  if (through_library(cpu::conv_pass::backprop_input, g, k, f, dy, dx)) return;
  if constexpr (std::is_same_v<T, float>) {
    if (whole_product(g, k)) {
      if (is_pointwise(g)) return gemm(dy, f, dx, rows, len, k, false, true);
      std::vector<float> patch_grads(static_cast<size_t>(rows * len));
      gemm(dy, f, patch_grads.data(), rows, len, k, false, true);
      return scatter_patches(g, patch_grads.data(), dx);
    }
  }
  // d patches[rows, len] = dy[rows, k] * f^T[k, len]: the library reads f
  // transposed in place; for the tiled kernel f^T is made row-major once.
  const bool wide = is_wide<T>(len, k), library = library_chunks<T>(wide);
  const int64_t step = chunk_rows(len, sizeof(T), wide);
  std::vector<T> ft;
  if (!library) {
    ft.resize(static_cast<size_t>(len * k));
    for (int64_t l = 0; l < len; ++l)
      for (int64_t o = 0; o < k; ++o) ft[static_cast<size_t>(o * len + l)] = f[l * k + o];
  }
  auto patch_grads = [&](int64_t m, const T* dy_rows, T* out) {
    if constexpr (std::is_same_v<T, float>)
      if (library && cpu::library_sgemm(false, true, m, len, k, dy_rows, k, f, k, out, len)) return;
    gemm_rows(m, len, k, dy_rows, k, 1, ft.data(), len, out, len, false);
  };
  if (is_pointwise(g)) {
    split(rows, step, rows * len * k,
          [&](int64_t b, int64_t e) { patch_grads(e - b, dy + b * k, dx + b * len); });
    return;
  }
  // Windows that never overlap (a strided 1x1 filter, a 2x2 filter at stride
  // 2): no two rows scatter to one input element, so rows split freely, in
  // chunks large enough for an efficient product, into dx zeroed first.
  if (g.kh <= g.sh && g.kw <= g.sw) {
    parallel_for(g.n * image, [&](int64_t b, int64_t e) { std::fill(dx + b, dx + e, T(0)); });
    split(rows, step, rows * len * k, [&](int64_t b, int64_t e) {
      T* cols = scratch<T>(std::min(step, e - b) * len);
      for (int64_t r0 = b; r0 < e; r0 += step) {
        const int64_t r1 = std::min(e, r0 + step);
        patch_grads(r1 - r0, dy + r0 * k, cols);
        col2im_add(g, r0, r1, cols, dx);
      }
    });
    return;
  }
  // col2im of one image's rows overlaps wherever windows do, so images are the
  // unit of parallel work; inside one, chunks run in order. Each image is zeroed
  // just before its first chunk scatters into it, while it is still in cache.
  split(g.n, 1, rows * len * k, [&](int64_t nb, int64_t ne) {
    const int64_t b = nb * pix, e = ne * pix;
    int64_t zeroed = nb;
    T* cols = scratch<T>(std::min(step, e - b) * len);
    for (int64_t r0 = b; r0 < e; r0 += step) {
      const int64_t r1 = std::min(e, r0 + step);
      patch_grads(r1 - r0, dy + r0 * k, cols);
      const int64_t last = (r1 - 1) / pix;
      std::fill(dx + zeroed * image, dx + (last + 1) * image, T(0));
      zeroed = last + 1;
      col2im_add(g, r0, r1, cols, dx);
    }
  });
}

template <class T>
void backprop_filter(const geometry& g, int64_t k, const T* x, const T* dy, T* df) {
  const int64_t rows = g.n * g.oh * g.ow, len = g.kh * g.kw * g.c;
  if constexpr (std::is_same_v<T, float>)
    if (rows > 0 && k > 0 && conv_detail::winograd_chosen(g, k))
      return conv_detail::winograd_backprop_filter(g, k, x, dy, df);
  if (rows > 0 && k > 0 && len > 0 &&
      through_library(cpu::conv_pass::backprop_filter, g, k, x, dy, df))
    return;
  if constexpr (std::is_same_v<T, float>) {
    if (rows > 0 && k > 0 && len > 0 && whole_product(g, k)) {
      if (is_pointwise(g)) return gemm(x, dy, df, len, k, rows, true, false);
      const auto patches = whole_patches(g, x);
      return gemm(patches.data(), dy, df, len, k, rows, true, false);
    }
  }
  std::fill(df, df + len * k, T(0));
  if (rows == 0 || k == 0 || len == 0) return;
  const bool wide = is_wide<T>(len, k), library = library_chunks<T>(wide);
  const int64_t step = chunk_rows(len, sizeof(T), wide);
  const bool pointwise = is_pointwise(g);
  // Adds patches^T[len, rows b..e) * dy[b..e), k] to acc[len, k]; the patch
  // matrix is read transposed in place (row stride 1, column stride len).
  auto body = [&](int64_t b, int64_t e, T* acc) {
    if (pointwise) {
      chunk_gemm(library, len, k, e - b, x + b * len, 1, len, dy + b * k, k, acc, k, true);
      return;
    }
    T* cols = scratch<T>(std::min(step, e - b) * len);
    for (int64_t r0 = b; r0 < e; r0 += step) {
      const int64_t r1 = std::min(e, r0 + step);
      im2col(g, r0, r1, x, cols);
      chunk_gemm(library, len, k, r1 - r0, cols, 1, len, dy + r0 * k, k, acc, k, true);
    }
  };
  if (rows * len * k < parallel_macs || rows <= step) {
    body(0, rows, df);
    return;
  }
  // Per-thread partial sums, reduced once at the end.
  tbb::enumerable_thread_specific<std::vector<T>> partials(static_cast<size_t>(len * k), T(0));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, step),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      body(r.begin(), r.end(), partials.local().data());
                    });
  for (auto& p : partials)
    for (int64_t i = 0; i < len * k; ++i) df[i] += p[static_cast<size_t>(i)];
}

// --- registration ---

std::vector<tensor_spec> infer_conv2d(const shape_context& c) {
  auto& in = c.inputs[0];
  auto& f = c.inputs[1];
  check_float_pair(c.op, in.type, f.type, "input", "filter");
  auto d = conv_geometry(c.op, in.dims, f.dims, c.attrs);
  return {{in.type, conv_output_shape(d)}};
}

std::vector<tensor_spec> infer_backprop_input(const shape_context& c) {
  auto& like = c.inputs[0];
  auto& f = c.inputs[1];
  auto& dy = c.inputs[2];
  check_float_pair(c.op, f.type, dy.type, "filter", "out_backprop");
  auto d = conv_geometry(c.op, like.dims, f.dims, c.attrs);
  check_out_backprop(c.op, d, dy.dims);
  shape out = like.dims;
  if (out[0] < 0) out[0] = dy.dims[0];
  return {{f.type, out}};
}

std::vector<tensor_spec> infer_backprop_filter(const shape_context& c) {
  auto& in = c.inputs[0];
  auto& like = c.inputs[1];
  auto& dy = c.inputs[2];
  check_float_pair(c.op, in.type, dy.type, "input", "out_backprop");
  auto d = conv_geometry(c.op, in.dims, like.dims, c.attrs);
  check_out_backprop(c.op, d, dy.dims);
  shape out = like.dims;
  if (out[3] < 0) out[3] = dy.dims[3];
  return {{in.type, out}};
}

// ---- bfloat16 ----------------------------------------------------------------
// The three kernels take bfloat16 operands through float32: converted, the float kernel, the
// result rounded once. The sums are float32's, as in the bfloat16 matmul and TensorFlow's CPU
// kernels; the conversions cost two passes over the data, small beside the products.

tensor to_float32(const tensor& t) {
  tensor f(dtype::float32, t.dims());
  const bfloat16* in = t.data<bfloat16>();
  float* out = f.mutable_data<float>();
  parallel_for(t.num_elements(),
               [&](int64_t b, int64_t e) { bfloat16_to_float(in + b, out + b, e - b); });
  return f;
}

void round_into(const tensor& f, tensor& out) {
  const float* in = f.data<float>();
  bfloat16* o = out.mutable_data<bfloat16>();
  parallel_for(f.num_elements(),
               [&](int64_t b, int64_t e) { float_to_bfloat16(in + b, o + b, e - b); });
}

// out = run(a, b, result) on float32 copies of bfloat16 tensors a and b.
template <class Run>
void through_float32(const tensor& a, const tensor& b, tensor& out, Run run) {
  tensor fa = to_float32(a), fb = to_float32(b), result(dtype::float32, out.dims());
  run(fa.data<float>(), fb.data<float>(), result.mutable_data<float>());
  round_into(result, out);
}

void conv2d_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  const tensor& f = ctx.input(1);
  check_float_pair(ctx.op, x.type(), f.type(), "input", "filter");
  auto d = conv_geometry(ctx.op, x.dims(), f.dims(), ctx.attrs);
  tensor& y = ctx.allocate_output(0, x.type(), conv_output_shape(d));
  if (x.type() == dtype::bfloat16) {
    if (through_library(cpu::conv_pass::forward, d.g, d.k, x.data<bfloat16>(), f.data<bfloat16>(),
                        y.mutable_data<bfloat16>()))
      return;
    return through_float32(x, f, y, [&](const float* px, const float* pf, float* py) {
      forward<float>(d.g, d.k, px, pf, py);
    });
  }
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    forward<T>(d.g, d.k, x.data<T>(), f.data<T>(), y.mutable_data<T>());
  });
}

// fused_conv2d: act(conv2d(x, f) + bias), made by the graph optimizer.
std::vector<tensor_spec> infer_fused_conv2d(const shape_context& c) {
  auto out = infer_conv2d(c);
  auto& bias = c.inputs[2];
  if (bias.type != out[0].type || bias.dims.rank() != 1 ||
      (bias.dims[0] >= 0 && bias.dims[0] != out[0].dims.dim(-1)))
    c.fail("bias " + bias.to_string() + " does not match the convolution " + out[0].to_string());
  parse_activation(c.attr<std::string>("activation"), c.op);
  return out;
}

void fused_conv2d_kernel(kernel_context& ctx) {
  const tensor &x = ctx.input(0), &f = ctx.input(1), &bias = ctx.input(2);
  check_float_pair(ctx.op, x.type(), f.type(), "input", "filter");
  auto d = conv_geometry(ctx.op, x.dims(), f.dims(), ctx.attrs);
  if (bias.type() != x.type() || bias.rank() != 1 || bias.dims()[0] != d.k)
    ctx.fail("bias " + tensor_spec{bias.type(), bias.dims()}.to_string() + " does not match " +
             std::to_string(d.k) + " output channels");
  const activation act = parse_activation(ctx.attr<std::string>("activation"), ctx.op);
  tensor& y = ctx.allocate_output(0, x.type(), conv_output_shape(d));
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    forward<T>(d.g, d.k, x.data<T>(), f.data<T>(), y.mutable_data<T>(),
               epilogue<T>{bias.data<T>(), act});
  });
}

void backprop_input_kernel(kernel_context& ctx) {
  const tensor& like = ctx.input(0);
  const tensor& f = ctx.input(1);
  const tensor& dy = ctx.input(2);
  check_float_pair(ctx.op, f.type(), dy.type(), "filter", "out_backprop");
  auto d = conv_geometry(ctx.op, like.dims(), f.dims(), ctx.attrs);
  check_out_backprop(ctx.op, d, dy.dims());
  tensor& dx = ctx.allocate_output(0, f.type(), like.dims());
  if (f.type() == dtype::bfloat16) {
    if (through_library(cpu::conv_pass::backprop_input, d.g, d.k, f.data<bfloat16>(),
                        dy.data<bfloat16>(), dx.mutable_data<bfloat16>()))
      return;
    return through_float32(f, dy, dx, [&](const float* pf, const float* pdy, float* pdx) {
      backprop_input<float>(d.g, d.k, pf, pdy, pdx);
    });
  }
  visit_floating(f.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    backprop_input<T>(d.g, d.k, f.data<T>(), dy.data<T>(), dx.mutable_data<T>());
  });
}

void backprop_filter_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  const tensor& like = ctx.input(1);
  const tensor& dy = ctx.input(2);
  check_float_pair(ctx.op, x.type(), dy.type(), "input", "out_backprop");
  auto d = conv_geometry(ctx.op, x.dims(), like.dims(), ctx.attrs);
  check_out_backprop(ctx.op, d, dy.dims());
  tensor& df = ctx.allocate_output(0, x.type(), like.dims());
  if (x.type() == dtype::bfloat16) {
    if (through_library(cpu::conv_pass::backprop_filter, d.g, d.k, x.data<bfloat16>(),
                        dy.data<bfloat16>(), df.mutable_data<bfloat16>()))
      return;
    return through_float32(x, dy, df, [&](const float* px, const float* pdy, float* pdf) {
      backprop_filter<float>(d.g, d.k, px, pdy, pdf);
    });
  }
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    backprop_filter<T>(d.g, d.k, x.data<T>(), dy.data<T>(), df.mutable_data<T>());
  });
}

// ---- gradients -------------------------------------------------------------
// conv2d is linear in each operand, and its two backprops are its adjoints, so
// each op's gradients are the other two ops (as TensorFlow's nn_grad.py). The
// attributes pass through unchanged.

void conv2d_grad(grad_context& c) {
  auto x = c.input(0), f = c.input(1), dy = c.grad();
  c.input_grads = {make_op("conv2d_backprop_input", {x, f, dy}, c.attrs),
                   make_op("conv2d_backprop_filter", {x, f, dy}, c.attrs)};
}

// dx = B(f, dy): d/df = backprop_filter(g, f, dy), d/ddy = conv2d(g, f).
void backprop_input_grad(grad_context& c) {
  auto f = c.input(1), dy = c.input(2), g = c.grad();
  c.input_grads = {output(), make_op("conv2d_backprop_filter", {g, f, dy}, c.attrs),
                   make_op("conv2d", {g, f}, c.attrs)};
}

// df = B(x, dy): d/dx = backprop_input(x, g, dy), d/ddy = conv2d(x, g).
void backprop_filter_grad(grad_context& c) {
  auto x = c.input(0), dy = c.input(2), g = c.grad();
  c.input_grads = {make_op("conv2d_backprop_input", {x, g, dy}, c.attrs), output(),
                   make_op("conv2d", {x, g}, c.attrs)};
}

const op_registrar registrations[] = {
    op_registrar({.name = "conv2d",
                  .num_inputs = 2,
                  .infer = infer_conv2d,
                  .kernel = conv2d_kernel,
                  .expensive = true,
                  .summary = "2-D convolution of NHWC input with a [KH,KW,C,K] filter",
                  .gradient = conv2d_grad}),
    op_registrar({.name = "conv2d_backprop_input",
                  .num_inputs = 3,
                  .infer = infer_backprop_input,
                  .kernel = backprop_input_kernel,
                  .expensive = true,
                  .summary = "gradient of conv2d with respect to its input",
                  .gradient = backprop_input_grad}),
    op_registrar({.name = "conv2d_backprop_filter",
                  .num_inputs = 3,
                  .infer = infer_backprop_filter,
                  .kernel = backprop_filter_kernel,
                  .expensive = true,
                  .summary = "gradient of conv2d with respect to its filter",
                  .gradient = backprop_filter_grad}),
    op_registrar({.name = "fused_conv2d",
                  .num_inputs = 3,
                  .infer = infer_fused_conv2d,
                  .kernel = fused_conv2d_kernel,
                  .expensive = true,
                  .summary = "act(conv2d(x, f) + bias), made by the graph optimizer after "
                             "gradients are built (so it has none of its own)",
                  .not_differentiable = true}),
};

attr_map conv_attrs(std::vector<int64_t> strides, const std::string& padding) {
  return {{"strides", std::move(strides)}, {"padding", std::string(padding)}};
}

}  // namespace

output conv2d(output input, output filter, std::vector<int64_t> strides, const std::string& padding,
              const std::string& name) {
  return make_op("conv2d", {input, filter}, conv_attrs(std::move(strides), padding), name);
}

output conv2d_backprop_input(output input_like, output filter, output out_backprop,
                             std::vector<int64_t> strides, const std::string& padding,
                             const std::string& name) {
  return make_op("conv2d_backprop_input", {input_like, filter, out_backprop},
                 conv_attrs(std::move(strides), padding), name);
}

output conv2d_backprop_filter(output input, output filter_like, output out_backprop,
                              std::vector<int64_t> strides, const std::string& padding,
                              const std::string& name) {
  return make_op("conv2d_backprop_filter", {input, filter_like, out_backprop},
                 conv_attrs(std::move(strides), padding), name);
}

}  // namespace actorflow
