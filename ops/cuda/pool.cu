// max_pool, avg_pool and their gradients on NHWC data, as CUDA kernels rather
// than cuDNN: TensorFlow's SAME padding puts the odd padding row / column at
// the bottom / right, which cuDNN's pooling (symmetric padding only) cannot
// express, and TensorFlow's max-pool gradient goes to the first maximum of a
// window, an order cuDNN does not promise.
//
// The gradients gather instead of scatter: each input element sums the
// gradients of the windows that cover it, in the order the CPU kernel adds
// them (ops/pool.cpp), without atomics - so the result is deterministic.
#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

struct window {
  int64_t hs, he, ws, we;
  __device__ int64_t count() const { return (he - hs) * (we - ws); }
};

// The input rows [hs, he) x cols [ws, we) of output (oy, ox); never empty.
__device__ window window_at(const pool_geometry& g, int64_t oy, int64_t ox) {
  const int64_t hs = oy * g.sh - g.pad_top, ws = ox * g.sw - g.pad_left;
  return {hs < 0 ? 0 : hs, min(hs + g.kh, g.h), ws < 0 ? 0 : ws, min(ws + g.kw, g.w)};
}

// The outputs along one axis whose windows cover input position i: [lo, hi].
__device__ void covering(int64_t i, int64_t pad, int64_t k, int64_t stride, int64_t out,
                         int64_t& lo, int64_t& hi) {
  const int64_t p = i + pad;                            // position in the padded input
  lo = p - k + 1 <= 0 ? 0 : (p - k + stride) / stride;  // ceil((p - k + 1) / stride)
  hi = min(p / stride, out - 1);
}

template <class T, bool is_max>
__global__ void pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, pool_geometry g) {
  AF_GRID_LOOP(t, g.n * g.oh * g.ow * g.c) {
    const int64_t ch = t % g.c;
    int64_t rest = t / g.c;
    const int64_t ox = rest % g.ow;
    rest /= g.ow;
    const int64_t oy = rest % g.oh, n = rest / g.oh;
    const window w = window_at(g, oy, ox);
    const T* img = x + n * g.h * g.w * g.c + ch;
    T acc = img[(w.hs * g.w + w.ws) * g.c];
    bool first = true;
    for (int64_t ih = w.hs; ih < w.he; ++ih)
      for (int64_t iw = w.ws; iw < w.we; ++iw) {
        if (first) {
          first = false;
          continue;
        }
        const T v = img[(ih * g.w + iw) * g.c];
        if constexpr (is_max)
          acc = v > acc ? v : acc;
        else
          acc += v;
      }
    if constexpr (!is_max) acc *= T(1) / T(w.count());
    y[t] = acc;
  }
}

// Position (row-major within the window) of the first maximum of window w.
template <class T>
__device__ int64_t first_max(const T* img, const pool_geometry& g, const window& w) {
  T best = img[(w.hs * g.w + w.ws) * g.c];
  int64_t at = 0, p = 0;
  for (int64_t ih = w.hs; ih < w.he; ++ih)
    for (int64_t iw = w.ws; iw < w.we; ++iw, ++p) {
      const T v = img[(ih * g.w + iw) * g.c];
      if (v > best) {
        best = v;
        at = p;
      }
    }
  return at;
}

template <class T>
__global__ void max_pool_backward_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                         T* __restrict__ dx, pool_geometry g) {
  AF_GRID_LOOP(t, g.n * g.h * g.w * g.c) {
    const int64_t ch = t % g.c;
    int64_t rest = t / g.c;
    const int64_t iw = rest % g.w;
    rest /= g.w;
    const int64_t ih = rest % g.h, n = rest / g.h;
    const T* img = x + n * g.h * g.w * g.c + ch;
    int64_t oy0, oy1, ox0, ox1;
    covering(ih, g.pad_top, g.kh, g.sh, g.oh, oy0, oy1);
    covering(iw, g.pad_left, g.kw, g.sw, g.ow, ox0, ox1);
    T acc = T(0);
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const window w = window_at(g, oy, ox);
        const int64_t at = first_max(img, g, w);
        const int64_t wcols = w.we - w.ws;
        if (w.hs + at / wcols == ih && w.ws + at % wcols == iw)
          acc += dy[((n * g.oh + oy) * g.ow + ox) * g.c + ch];
      }
    dx[t] = acc;
  }
}

template <class T>
__global__ void avg_pool_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx,
                                         pool_geometry g) {
  AF_GRID_LOOP(t, g.n * g.h * g.w * g.c) {
    const int64_t ch = t % g.c;
    int64_t rest = t / g.c;
    const int64_t iw = rest % g.w;
    rest /= g.w;
    const int64_t ih = rest % g.h, n = rest / g.h;
    int64_t oy0, oy1, ox0, ox1;
    covering(ih, g.pad_top, g.kh, g.sh, g.oh, oy0, oy1);
    covering(iw, g.pad_left, g.kw, g.sw, g.ow, ox0, ox1);
    T acc = T(0);
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const window w = window_at(g, oy, ox);
        acc += dy[((n * g.oh + oy) * g.ow + ox) * g.c + ch] * (T(1) / T(w.count()));
      }
    dx[t] = acc;
  }
}

}  // namespace

void pool_forward(bool is_max, dtype t, const void* x, void* y, const pool_geometry& g,
                  cudaStream_t s) {
  const int64_t n = g.n * g.oh * g.ow * g.c;
  if (n == 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    if (is_max)
      pool_forward_kernel<T, true><<<blocks_for(n), block_threads, 0, s>>>(px, py, g);
    else
      pool_forward_kernel<T, false><<<blocks_for(n), block_threads, 0, s>>>(px, py, g);
  });
  note_launch();
}

void max_pool_backward(dtype t, const void* x, const void* dy, void* dx, const pool_geometry& g,
                       cudaStream_t s) {
  const int64_t n = g.n * g.h * g.w * g.c;
  if (n == 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    max_pool_backward_kernel<T><<<blocks_for(n), block_threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), g);
  });
  note_launch();
}

void avg_pool_backward(dtype t, const void* dy, void* dx, const pool_geometry& g, cudaStream_t s) {
  const int64_t n = g.n * g.h * g.w * g.c;
  if (n == 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    avg_pool_backward_kernel<T>
        <<<blocks_for(n), block_threads, 0, s>>>(static_cast<const T*>(dy), static_cast<T*>(dx), g);
  });
  note_launch();
}

}  // namespace actorflow::gpu::kernels
