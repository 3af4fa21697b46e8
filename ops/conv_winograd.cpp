#include "ops/conv_winograd.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "core/error.hpp"
#include "devices/cpu/gemm_library.hpp"
#include "devices/cpu/parallel.hpp"

namespace actorflow::conv_detail {

namespace {

std::atomic<bool> enabled{[] {
  const char* v = std::getenv("ACTORFLOW_CPU_CONV_WINOGRAD");
  return !(v && std::string_view(v) == "0");
}()};

constexpr int planes = 16;  // a 4x4 tile's elements, one product each

// Floats of the tiles' transforms a block holds at once (4 MiB): blocks of a
// few hundred tiles keep the products' operands in the last-level cache and
// their rows many enough for the library's kernels. From 2 to 8 MiB the 3x3
// rows of --only conv moved within their noise on a Zen 3 (geometric means of
// 255-278 GFLOP/s over alternating runs); 16 MiB was slower (222-258).
constexpr int64_t block_floats = int64_t{1} << 20;

// A row stride for n floats that is no multiple of 2 KB: the GEMM library
// reads such rows slowly (gemm_library.cpp) and would copy them first.
int64_t padded(int64_t n) { return n % 512 == 0 ? n + 16 : n; }

std::unique_ptr<float[]> floats(int64_t n) {
  return std::unique_ptr<float[]>(new float[static_cast<size_t>(n)]);
}

// One correlation with a 3x3 filter at unit strides, in the form both the
// forward and the input gradient take: out[b, oy, ox, :] is the sum over r, s
// of in[b, oy + r - pad_top, ox + s - pad_left, :] times the filter's tap
// (r, s) (zeros outside the input). Tiles are the output's 2x2 squares.
struct tiling {
  int64_t n, ih, iw, ci;  // the input
  int64_t oh, ow, co;     // the output
  int64_t pad_top, pad_left;
  int64_t tiles_w() const { return (ow + 1) / 2; }
  int64_t per_image() const { return ((oh + 1) / 2) * tiles_w(); }
  int64_t tiles() const { return n * per_image(); }
};

struct tile_origin {
  int64_t b, oy, ox;  // image and the tile's first output row and column
};

tile_origin locate(const tiling& t, int64_t index) {
  const int64_t rest = index % t.per_image();
  return {index / t.per_image(), 2 * (rest / t.tiles_w()), 2 * (rest % t.tiles_w())};
}

// Tiles per block: as many as block_floats holds (`row` floats of transforms
// per tile and plane), at least 64 (thinner products are slow), at most all.
int64_t block_tiles(int64_t tiles, int64_t row) {
  return std::min(tiles, std::max<int64_t>(64, block_floats / (planes * row)));
}

int64_t tile_grain(int64_t channels) {
  return std::max<int64_t>(1, parallel_grain / (planes * std::max<int64_t>(channels, 1)));
}

// --- the transforms, each over a run of channels (the innermost NHWC axis) ---

// v[xi * plane] = (B^T d B)[xi] for each channel, d the 4x4 tile p points into.
inline void input_tile(const float* const* p, int64_t count, float* __restrict v, int64_t plane) {
#pragma GCC ivdep
  for (int64_t c = 0; c < count; ++c) {
    float t[4][4];
    for (int j = 0; j < 4; ++j) {
      const float d0 = p[j][c], d1 = p[4 + j][c], d2 = p[8 + j][c], d3 = p[12 + j][c];
      t[0][j] = d0 - d2;
      t[1][j] = d1 + d2;
      t[2][j] = d2 - d1;
      t[3][j] = d1 - d3;
    }
    for (int i = 0; i < 4; ++i) {
      v[(i * 4 + 0) * plane + c] = t[i][0] - t[i][2];
      v[(i * 4 + 1) * plane + c] = t[i][1] + t[i][2];
      v[(i * 4 + 2) * plane + c] = t[i][2] - t[i][1];
      v[(i * 4 + 3) * plane + c] = t[i][1] - t[i][3];
    }
  }
}

// q[0..3] (the 2x2 outputs) = A^T m A for each channel, m the 16 planes at m.
inline void output_tile(const float* __restrict m, int64_t plane, float* const* q, int64_t count) {
#pragma GCC ivdep
  for (int64_t c = 0; c < count; ++c) {
    float s[2][4];
    for (int j = 0; j < 4; ++j) {
      const float m0 = m[j * plane + c], m1 = m[(4 + j) * plane + c];
      const float m2 = m[(8 + j) * plane + c], m3 = m[(12 + j) * plane + c];
      s[0][j] = m0 + m1 + m2;
      s[1][j] = m1 - m2 - m3;
    }
    for (int a = 0; a < 2; ++a) {
      q[2 * a][c] = s[a][0] + s[a][1] + s[a][2];
      q[2 * a + 1][c] = s[a][1] - s[a][2] - s[a][3];
    }
  }
}

// v[xi * plane] = (A g A^T)[xi] for each channel, g the 2x2 tile of dy p points into.
inline void gradient_tile(const float* const* p, int64_t count, float* __restrict v,
                          int64_t plane) {
#pragma GCC ivdep
  for (int64_t c = 0; c < count; ++c) {
    const float g00 = p[0][c], g01 = p[1][c], g10 = p[2][c], g11 = p[3][c];
    const float h[4][2] = {
        {g00, g01}, {g00 + g10, g01 + g11}, {g00 - g10, g01 - g11}, {-g10, -g11}};
    for (int i = 0; i < 4; ++i) {
      v[(i * 4 + 0) * plane + c] = h[i][0];
      v[(i * 4 + 1) * plane + c] = h[i][0] + h[i][1];
      v[(i * 4 + 2) * plane + c] = h[i][0] - h[i][1];
      v[(i * 4 + 3) * plane + c] = -h[i][1];
    }
  }
}

// The input tiles of tiles [t0, t1) into v (plane-major, rows ld apart).
void transform_inputs(const tiling& t, const float* in, const float* zeros, int64_t t0, int64_t t1,
                      float* v, int64_t plane, int64_t ld) {
  parallel_for(t1 - t0, tile_grain(t.ci), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const tile_origin at = locate(t, t0 + i);
      const float* p[16];
      for (int r = 0; r < 4; ++r)
        for (int s = 0; s < 4; ++s) {
          const int64_t y = at.oy + r - t.pad_top, x = at.ox + s - t.pad_left;
          const bool inside = y >= 0 && y < t.ih && x >= 0 && x < t.iw;
          p[r * 4 + s] = inside ? in + ((at.b * t.ih + y) * t.iw + x) * t.ci : zeros;
        }
      input_tile(p, t.ci, v + i * ld, plane);
    }
  });
}

// The output gradient's 2x2 tiles of tiles [t0, t1) into v, as transform_inputs.
void transform_gradients(const tiling& t, const float* dy, const float* zeros, int64_t t0,
                         int64_t t1, float* v, int64_t plane, int64_t ld) {
  parallel_for(t1 - t0, tile_grain(t.co), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const tile_origin at = locate(t, t0 + i);
      const float* p[4];
      for (int a = 0; a < 2; ++a)
        for (int c = 0; c < 2; ++c) {
          const bool inside = at.oy + a < t.oh && at.ox + c < t.ow;
          p[a * 2 + c] =
              inside ? dy + ((at.b * t.oh + at.oy + a) * t.ow + at.ox + c) * t.co : zeros;
        }
      gradient_tile(p, t.co, v + i * ld, plane);
    }
  });
}

// The products' results m of tiles [t0, t1) into out; outputs past the last
// row or column (odd sizes) go to a scratch row.
void transform_outputs(const tiling& t, const float* m, int64_t t0, int64_t t1, int64_t plane,
                       int64_t ld, float* out) {
  parallel_for(t1 - t0, tile_grain(t.co), [&](int64_t b, int64_t e) {
    const auto discard = floats(t.co);
    for (int64_t i = b; i < e; ++i) {
      const tile_origin at = locate(t, t0 + i);
      float* q[4];
      for (int a = 0; a < 2; ++a)
        for (int c = 0; c < 2; ++c) {
          const bool inside = at.oy + a < t.oh && at.ox + c < t.ow;
          q[a * 2 + c] =
              inside ? out + ((at.b * t.oh + at.oy + a) * t.ow + at.ox + c) * t.co : discard.get();
        }
      output_tile(m + i * ld, plane, q, t.co);
    }
  });
}

// u[xi * plane + c * ld + k] = (G g G^T)[xi] for g = f[., ., c, k], the filter
// turned by 180 degrees where `turned` (the input gradient's).
void transform_filter(const float* f, int64_t channels, int64_t k, bool turned, float* u,
                      int64_t plane, int64_t ld) {
  parallel_for(channels, std::max<int64_t>(1, parallel_grain / (planes * k)),
               [&](int64_t b, int64_t e) {
                 for (int64_t c = b; c < e; ++c) {
                   const float* g[9];
                   for (int tap = 0; tap < 9; ++tap)
                     g[tap] = f + ((turned ? 8 - tap : tap) * channels + c) * k;
                   float* __restrict dst = u + c * ld;
#pragma GCC ivdep
                   for (int64_t o = 0; o < k; ++o) {
                     float h[4][3];
                     for (int s = 0; s < 3; ++s) {
                       const float w0 = g[s][o], w1 = g[3 + s][o], w2 = g[6 + s][o];
                       h[0][s] = w0;
                       h[1][s] = 0.5f * (w0 + w1 + w2);
                       h[2][s] = 0.5f * (w0 - w1 + w2);
                       h[3][s] = w2;
                     }
                     for (int i = 0; i < 4; ++i) {
                       dst[(i * 4 + 0) * plane + o] = h[i][0];
                       dst[(i * 4 + 1) * plane + o] = 0.5f * (h[i][0] + h[i][1] + h[i][2]);
                       dst[(i * 4 + 2) * plane + o] = 0.5f * (h[i][0] - h[i][1] + h[i][2]);
                       dst[(i * 4 + 3) * plane + o] = h[i][2];
                     }
                   }
                 }
               });
}

// df[r, s, c, k] = (G^T m G)[r, s] for the summed products m[xi * plane + c * ld + k].
void filter_from_products(const float* m, int64_t channels, int64_t k, int64_t plane, int64_t ld,
                          float* df) {
  parallel_for(channels, std::max<int64_t>(1, parallel_grain / (planes * k)),
               [&](int64_t b, int64_t e) {
                 for (int64_t c = b; c < e; ++c) {
                   const float* __restrict src = m + c * ld;
#pragma GCC ivdep
                   for (int64_t o = 0; o < k; ++o) {
                     float h[3][4];
                     for (int j = 0; j < 4; ++j) {
                       const float m0 = src[j * plane + o], m1 = src[(4 + j) * plane + o];
                       const float m2 = src[(8 + j) * plane + o], m3 = src[(12 + j) * plane + o];
                       h[0][j] = m0 + 0.5f * (m1 + m2);
                       h[1][j] = 0.5f * (m1 - m2);
                       h[2][j] = 0.5f * (m1 + m2) + m3;
                     }
                     for (int r = 0; r < 3; ++r) {
                       float* row = df + (r * 3 * channels + c) * k + o;
                       row[0] = h[r][0] + 0.5f * (h[r][1] + h[r][2]);
                       row[channels * k] = 0.5f * (h[r][1] - h[r][2]);
                       row[2 * channels * k] = 0.5f * (h[r][1] + h[r][2]) + h[r][3];
                     }
                   }
                 }
               });
}

// --- the products ---

// c (m x n, rows ldc apart) [+]= op(a) x op(b) on the calling thread, by the
// GEMM library: winograd_chosen takes only problems it is on for, and it is
// switched only while no kernel runs.
void plane_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (!cpu::library_sgemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate))
    fail(error_code::internal, "conv2d",
         "Winograd's products need the GEMM library, which was turned off while a kernel ran");
}

// Runs each of the 16 planes' products as one task.
template <class F>
void for_each_plane(F&& product) {
  parallel_for(planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t xi = b; xi < e; ++xi) product(xi);
  });
}

// out = the correlation t describes, of `in` with the transformed filter u
// (planes u_plane apart; [ci, co] rows u_ld apart, or [co, ci] where
// u_transposed).
void correlate(const tiling& t, const float* in, const float* u, int64_t u_plane, int64_t u_ld,
               bool u_transposed, float* out) {
  const int64_t ld_in = padded(t.ci), ld_out = padded(t.co), tiles = t.tiles();
  const int64_t block = block_tiles(tiles, ld_in + ld_out);
  const auto v = floats(planes * block * ld_in), m = floats(planes * block * ld_out);
  const auto zeros = std::make_unique<float[]>(static_cast<size_t>(t.ci));
  for (int64_t t0 = 0; t0 < tiles; t0 += block) {
    const int64_t t1 = std::min(tiles, t0 + block);
    transform_inputs(t, in, zeros.get(), t0, t1, v.get(), block * ld_in, ld_in);
    for_each_plane([&](int64_t xi) {
      plane_product(false, u_transposed, t1 - t0, t.co, t.ci, v.get() + xi * block * ld_in, ld_in,
                    u + xi * u_plane, u_ld, m.get() + xi * block * ld_out, ld_out, false);
    });
    transform_outputs(t, m.get(), t0, t1, block * ld_out, ld_out, out);
  }
}

}  // namespace

void use_winograd(bool on) { enabled.store(on, std::memory_order_relaxed); }

bool winograd_on() { return enabled.load(std::memory_order_relaxed); }

bool winograd_chosen(const geometry& g, int64_t k) {
  return winograd_on() && cpu::gemm_library_on() && g.kh == 3 && g.kw == 3 && g.sh == 1 &&
         g.sw == 1 && g.c >= winograd_min_channels && k >= winograd_min_channels &&
         g.n * g.oh * g.ow > 0;
}

void winograd_forward(const geometry& g, int64_t k, const float* x, const float* f, float* y) {
  const int64_t ld = padded(k), plane = g.c * ld;
  const auto u = floats(planes * plane);
  transform_filter(f, g.c, k, false, u.get(), plane, ld);
  const tiling t{g.n, g.h, g.w, g.c, g.oh, g.ow, k, g.pad_top, g.pad_left};
  correlate(t, x, u.get(), plane, ld, false, y);
}

// dx[i] = sum over r of dy[i - r + pad] f[r] = sum over r' of dy[i + r' - (2 - pad)] f[2 - r']:
// a correlation of dy with the turned filter, padded by 2 - pad, read with its
// channels swapped ([c, k] planes taken transposed).
void winograd_backprop_input(const geometry& g, int64_t k, const float* f, const float* dy,
                             float* dx) {
  const int64_t ld = padded(k), plane = g.c * ld;
  const auto u = floats(planes * plane);
  transform_filter(f, g.c, k, true, u.get(), plane, ld);
  const tiling t{g.n, g.oh, g.ow, k, g.h, g.w, g.c, 2 - g.pad_top, 2 - g.pad_left};
  correlate(t, dy, u.get(), plane, ld, true, dx);
}

void winograd_backprop_filter(const geometry& g, int64_t k, const float* x, const float* dy,
                              float* df) {
  const tiling t{g.n, g.h, g.w, g.c, g.oh, g.ow, k, g.pad_top, g.pad_left};
  const int64_t ld_c = padded(g.c), ld_k = padded(k), tiles = t.tiles();
  const int64_t block = block_tiles(tiles, ld_c + ld_k);
  const auto v = floats(planes * block * ld_c), d = floats(planes * block * ld_k);
  const auto sums = floats(planes * g.c * ld_k);
  const auto zeros = std::make_unique<float[]>(static_cast<size_t>(std::max(g.c, k)));
  for (int64_t t0 = 0; t0 < tiles; t0 += block) {
    const int64_t t1 = std::min(tiles, t0 + block);
    transform_inputs(t, x, zeros.get(), t0, t1, v.get(), block * ld_c, ld_c);
    transform_gradients(t, dy, zeros.get(), t0, t1, d.get(), block * ld_k, ld_k);
    // sums[xi] (c x k) += v[xi]^T (c x tiles) d[xi] (tiles x k)
    for_each_plane([&](int64_t xi) {
      plane_product(true, false, g.c, k, t1 - t0, v.get() + xi * block * ld_c, ld_c,
                    d.get() + xi * block * ld_k, ld_k, sums.get() + xi * g.c * ld_k, ld_k, t0 > 0);
    });
  }
  filter_from_products(sums.get(), g.c, k, g.c * ld_k, ld_k, df);
}

}  // namespace actorflow::conv_detail
