// Softmax cross-entropy, dense and sparse labels, forward and backprop in one
// pass per row (ops/softmax.cpp's formulas): one warp per row, the row max and
// the sum of exponentials reduced with warp shuffles.
#include <cmath>
#include <limits>

#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

constexpr int warp = 32;
constexpr int rows_per_block = block_threads / warp;

template <class T>
__device__ T warp_max(T v) {
  for (int offset = warp / 2; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

template <class T>
__device__ T warp_sum(T v) {
  for (int offset = warp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The row's max m and sum of exp(x - m), in every lane.
template <class T>
__device__ void row_stats(const T* x, int64_t cols, int lane, T& m, T& sum) {
  m = -std::numeric_limits<T>::infinity();
  for (int64_t c = lane; c < cols; c += warp) m = x[c] > m ? x[c] : m;
  m = warp_max(m);
  sum = T(0);
  for (int64_t c = lane; c < cols; c += warp) sum += exp(x[c] - m);
  sum = warp_sum(sum);
}

// loss = sum(p * (log(sum) - (x - m))); backprop = exp(x - m) / sum - p.
template <class T>
__global__ void xent_kernel(const T* __restrict__ logits, const T* __restrict__ labels,
                            T* __restrict__ loss, T* __restrict__ backprop, int64_t rows,
                            int64_t cols) {
  const int lane = threadIdx.x % warp;
  for (int64_t r = int64_t(blockIdx.x) * rows_per_block + threadIdx.x / warp; r < rows;
       r += int64_t(gridDim.x) * rows_per_block) {
    const T* x = logits + r * cols;
    const T* p = labels + r * cols;
    T* g = backprop + r * cols;
    T m, sum;
    row_stats(x, cols, lane, m, sum);
    const T log_sum = log(sum), inv = T(1) / sum;
    T l = T(0);
    for (int64_t c = lane; c < cols; c += warp) {
      const T shifted = x[c] - m;
      l += p[c] * (log_sum - shifted);
      g[c] = exp(shifted) * inv - p[c];
    }
    l = warp_sum(l);
    if (lane == 0) loss[r] = l;
  }
}

// loss = log(sum) - (x[label] - m); backprop = exp(x - m) / sum, minus 1 at the label.
template <class T, class L>
__global__ void sparse_xent_kernel(const T* __restrict__ logits, const L* __restrict__ labels,
                                   T* __restrict__ loss, T* __restrict__ backprop, int64_t rows,
                                   int64_t cols) {
  const int lane = threadIdx.x % warp;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (int64_t r = int64_t(blockIdx.x) * rows_per_block + threadIdx.x / warp; r < rows;
       r += int64_t(gridDim.x) * rows_per_block) {
    const T* x = logits + r * cols;
    T* g = backprop + r * cols;
    const int64_t label = static_cast<int64_t>(labels[r]);
    if (label < 0 || label >= cols) {
      for (int64_t c = lane; c < cols; c += warp) g[c] = nan;
      if (lane == 0) loss[r] = nan;
      continue;
    }
    T m, sum;
    row_stats(x, cols, lane, m, sum);
    const T inv = T(1) / sum;
    for (int64_t c = lane; c < cols; c += warp)
      g[c] = exp(x[c] - m) * inv - (c == label ? T(1) : T(0));
    if (lane == 0) loss[r] = log(sum) - (x[label] - m);
  }
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((rows + rows_per_block - 1) / rows_per_block, 1, 65535));
}

}  // namespace

void xent(dtype t, const void* logits, const void* labels, void* loss, void* backprop, int64_t rows,
          int64_t cols, cudaStream_t s) {
  if (rows == 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    xent_kernel<T><<<row_blocks(rows), block_threads, 0, s>>>(
        static_cast<const T*>(logits), static_cast<const T*>(labels), static_cast<T*>(loss),
        static_cast<T*>(backprop), rows, cols);
  });
  note_launch();
}

void sparse_xent(dtype t, dtype label_type, const void* logits, const void* labels, void* loss,
                 void* backprop, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0) return;
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    auto run = [&](auto label_tag) {
      using L = decltype(label_tag);
      sparse_xent_kernel<T, L><<<row_blocks(rows), block_threads, 0, s>>>(
          static_cast<const T*>(logits), static_cast<const L*>(labels), static_cast<T*>(loss),
          static_cast<T*>(backprop), rows, cols);
    };
    if (label_type == dtype::int32) run(int32_t{});
    if (label_type == dtype::int64) run(int64_t{});
  });
  note_launch();
}

}  // namespace actorflow::gpu::kernels
