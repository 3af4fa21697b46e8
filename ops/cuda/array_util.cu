// Fills and strided copies (gather, copy_window): what broadcasting,
// transposes, layout changes and fresh slots use across the families, as the
// CPU kernels use ops/array_util.cpp's fill_value and strided_copy.
#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

template <class T>
__global__ void fill_kernel(T* __restrict__ y, T value, int64_t n) {
  AF_GRID_LOOP(i, n) y[i] = value;
}

// ---- strided copies -------------------------------------------------------------------------

template <class E>
__global__ void gather_kernel(const E* __restrict__ x, E* __restrict__ y, index_plan p, int64_t n) {
  AF_GRID_LOOP(i, n) y[i] = x[plan_offset(p, 0, i)];
}

template <class E>
__global__ void strided_copy_kernel(const E* __restrict__ x, E* __restrict__ y, index_plan p,
                                    int64_t n) {
  AF_GRID_LOOP(i, n) y[plan_offset(p, 1, i)] = x[plan_offset(p, 0, i)];
}

template <class E>
__global__ void copy_window_kernel(const E* __restrict__ in, E* __restrict__ out, int64_t h,
                                   int64_t w, int64_t c, int64_t out_h, int64_t out_w, int64_t top,
                                   int64_t left, int64_t total) {
  AF_GRID_LOOP(i, total) {
    const int64_t ch = i % c;
    int64_t rest = i / c;
    const int64_t x = rest % out_w;
    rest /= out_w;
    const int64_t y = rest % out_h;
    const int64_t n = rest / out_h;
    const int64_t iy = y - top, ix = x - left;
    out[i] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? in[((n * h + iy) * w + ix) * c + ch] : E(0);
  }
}

}  // namespace

void fill(dtype t, double value, void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const T v = std::is_same_v<T, bool> ? T(value != 0) : static_cast<T>(value);
    fill_kernel<T><<<blocks_for(n), block_threads, 0, s>>>(static_cast<T*>(y), v, n);
  });
  note_launch();
}

void gather(size_t elem_size, const void* x, void* y, const index_plan& plan, int64_t n,
            cudaStream_t s) {
  if (n == 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    gather_kernel<E><<<blocks_for(n), block_threads, 0, s>>>(static_cast<const E*>(x),
                                                             static_cast<E*>(y), plan, n);
  });
  note_launch();
}

void strided_copy(size_t elem_size, const void* x, void* y, const index_plan& plan, int64_t n,
                  cudaStream_t s) {
  if (n == 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    strided_copy_kernel<E><<<blocks_for(n), block_threads, 0, s>>>(static_cast<const E*>(x),
                                                                   static_cast<E*>(y), plan, n);
  });
  note_launch();
}

void copy_window(size_t elem_size, const void* in, void* out, int64_t n, int64_t h, int64_t w,
                 int64_t c, int64_t out_h, int64_t out_w, int64_t top, int64_t left,
                 cudaStream_t s) {
  const int64_t total = n * out_h * out_w * c;
  if (total == 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    copy_window_kernel<E><<<blocks_for(total), block_threads, 0, s>>>(
        static_cast<const E*>(in), static_cast<E*>(out), h, w, c, out_h, out_w, top, left, total);
  });
  note_launch();
}

}  // namespace actorflow::gpu::kernels
