// Reductions over the middle dim of a dense (O, R, I) block, the form
// reduce_kernels.cpp brings every reduction to (as ops/reduce.cpp does).
//
// I == 1 (reducing trailing dims): a block of threads per row, a tree in
// shared memory. I > 1: a thread per output column, reading rows of the block
// with consecutive threads on consecutive columns (coalesced). When there are
// too few rows or columns to fill the GPU, R is split into parts reduced into
// a temporary first and combined by a second launch; the split depends on the
// shape only, so a result does not depend on the GPU it ran on.
#include <limits>

#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

template <class T>
struct sum_op {
  static __device__ T identity() { return T(0); }
  static __device__ T combine(T a, T b) { return static_cast<T>(wrap_t<T>(a) + wrap_t<T>(b)); }
};

template <class T>
struct prod_op {
  static __device__ T identity() { return T(1); }
  static __device__ T combine(T a, T b) { return static_cast<T>(wrap_t<T>(a) * wrap_t<T>(b)); }
};

// NaN wins, as on the CPU.
template <class T>
struct max_op {
  static __device__ T identity() {
    if constexpr (std::is_floating_point_v<T>)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
  static __device__ T combine(T a, T b) { return (b > a || is_nan(b)) ? b : a; }
};

template <class T>
struct min_op {
  static __device__ T identity() {
    if constexpr (std::is_floating_point_v<T>)
      return std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::max();
  }
  static __device__ T combine(T a, T b) { return (b < a || is_nan(b)) ? b : a; }
};

// The mean's division, after the last combine: integers truncate (as the CPU's).
template <class T>
__device__ T finish(T v, int64_t mean_count) {
  if (mean_count == 0) return v;
  if constexpr (std::is_floating_point_v<T>)
    return v / static_cast<T>(mean_count);
  else
    return static_cast<T>(static_cast<int64_t>(v) / mean_count);
}

// out[o * parts + k] = reduce of x[o, r] for r in part k.
template <class T, class Op>
__global__ void reduce_rows_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t O,
                                   int64_t R, int64_t parts, int64_t chunk, int64_t mean_count) {
  __shared__ T shared[block_threads];
  for (int64_t item = blockIdx.x; item < O * parts; item += gridDim.x) {
    const int64_t o = item / parts, k = item % parts;
    const int64_t r0 = k * chunk, r1 = min(R, r0 + chunk);
    T acc = Op::identity();
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
      acc = Op::combine(acc, x[o * R + r]);
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half)
        shared[threadIdx.x] = Op::combine(shared[threadIdx.x], shared[threadIdx.x + half]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[item] = finish(shared[0], mean_count);
    __syncthreads();  // shared is reused by the next item
  }
}

// out[(o * parts + k) * I + i] = reduce of x[o, r, i] for r in part k.
template <class T, class Op>
__global__ void reduce_cols_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t O,
                                   int64_t R, int64_t I, int64_t parts, int64_t chunk,
                                   int64_t mean_count) {
  AF_GRID_LOOP(t, O * parts * I) {
    const int64_t i = t % I, rest = t / I;
    const int64_t k = rest % parts, o = rest / parts;
    const int64_t r0 = k * chunk, r1 = min(R, r0 + chunk);
    T acc = Op::identity();
    for (int64_t r = r0; r < r1; ++r) acc = Op::combine(acc, x[(o * R + r) * I + i]);
    out[t] = finish(acc, mean_count);
  }
}

template <class T, class Op>
void reduce_pass(const T* x, T* out, int64_t O, int64_t R, int64_t I, int64_t parts,
                 int64_t mean_count, cudaStream_t s) {
  const int64_t chunk = (R + parts - 1) / parts;
  if (I == 1) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(O * parts, 65535));
    reduce_rows_kernel<T, Op>
        <<<blocks, block_threads, 0, s>>>(x, out, O, R, parts, chunk, mean_count);
  } else {
    reduce_cols_kernel<T, Op><<<blocks_for(O * parts * I), block_threads, 0, s>>>(
        x, out, O, R, I, parts, chunk, mean_count);
  }
}

template <class T, class Op>
void reduce_with(const T* x, T* out, T* partial, int64_t O, int64_t R, int64_t I, bool mean,
                 cudaStream_t s) {
  const int64_t parts = reduce_parts(O, R, I);
  if (parts == 1) {
    reduce_pass<T, Op>(x, out, O, R, I, 1, mean ? R : 0, s);
    return;
  }
  reduce_pass<T, Op>(x, partial, O, R, I, parts, 0, s);
  reduce_pass<T, Op>(partial, out, O, parts, I, 1, mean ? R : 0, s);
}

template <class T, bool is_max>
__device__ bool better(T v, T best) {
  if constexpr (is_max)
    return v > best || (is_nan(v) && !is_nan(best));
  else
    return v < best || (is_nan(v) && !is_nan(best));
}

template <class T, bool is_max>
__global__ void arg_kernel(const T* __restrict__ x, int64_t* __restrict__ out, int64_t O, int64_t R,
                           int64_t I) {
  AF_GRID_LOOP(t, O * I) {
    const int64_t i = t % I, o = t / I;
    const T* p = x + o * R * I + i;
    T best = p[0];
    int64_t at = 0;
    for (int64_t r = 1; r < R; ++r) {
      const T v = p[r * I];
      if (better<T, is_max>(v, best)) {
        best = v;
        at = r;
      }
    }
    out[t] = at;
  }
}

template <class T>
__global__ void half_squares_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  AF_GRID_LOOP(i, n) y[i] = x[i] * x[i] * T(0.5);
}

}  // namespace

void half_squares(dtype t, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  if (t == dtype::float64)
    half_squares_kernel<double><<<blocks_for(n), block_threads, 0, s>>>(
        static_cast<const double*>(x), static_cast<double*>(y), n);
  else
    half_squares_kernel<float><<<blocks_for(n), block_threads, 0, s>>>(static_cast<const float*>(x),
                                                                       static_cast<float*>(y), n);
  note_launch();
}

int64_t reduce_parts(int64_t O, int64_t R, int64_t I) {
  // Rows: below 256 rows a long row is split in parts of about 4096 elements.
  // Columns: below 16384 output columns a long R is split in parts of at least 64.
  if (I == 1) {
    if (O >= 256 || R <= 8192) return 1;
    return std::min<int64_t>((R + 4095) / 4096, 1024);
  }
  const int64_t columns = O * I;
  if (columns >= 16384 || R <= 128) return 1;
  return std::max<int64_t>(1, std::min((R + 63) / 64, (16384 + columns - 1) / columns));
}

void reduce(reduce_op op, dtype t, const void* x, void* out, void* partial, int64_t O, int64_t R,
            int64_t I, cudaStream_t s) {
  if (O * I == 0 || R == 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      const T* px = static_cast<const T*>(x);
      T* po = static_cast<T*>(out);
      T* pp = static_cast<T*>(partial);
      switch (op) {
        case reduce_op::sum:
        case reduce_op::mean:
          return reduce_with<T, sum_op<T>>(px, po, pp, O, R, I, op == reduce_op::mean, s);
        case reduce_op::prod:
          return reduce_with<T, prod_op<T>>(px, po, pp, O, R, I, false, s);
        case reduce_op::max:
          return reduce_with<T, max_op<T>>(px, po, pp, O, R, I, false, s);
        case reduce_op::min:
          return reduce_with<T, min_op<T>>(px, po, pp, O, R, I, false, s);
      }
    }
  });
  note_launch();
}

void arg_reduce(bool is_max, dtype t, const void* x, int64_t* out, int64_t O, int64_t R, int64_t I,
                cudaStream_t s) {
  if (O * I == 0 || R == 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      const T* px = static_cast<const T*>(x);
      if (is_max)
        arg_kernel<T, true><<<blocks_for(O * I), block_threads, 0, s>>>(px, out, O, R, I);
      else
        arg_kernel<T, false><<<blocks_for(O * I), block_threads, 0, s>>>(px, out, O, R, I);
    }
  });
  note_launch();
}

}  // namespace actorflow::gpu::kernels
