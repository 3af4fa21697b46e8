// Helpers of the .cu files: grid sizes, grid-stride loops, index plans, NaN
// tests that work for every element type, wrapping integer arithmetic, and
// dispatch by dtype or by element size.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/launch.hpp"

namespace actorflow::gpu::kernels {

inline constexpr int block_threads = 256;

/// Blocks for a grid-stride loop over n items (at least 1, at most 2^20).
inline unsigned blocks_for(int64_t n, int threads = block_threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, int64_t{1} << 20));
}

/// for (i = first; i < n; i += stride) over the whole grid.
#define AF_GRID_LOOP(i, n)                                                  \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

template <class T>
__device__ __forceinline__ bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

/// Integer arithmetic that wraps instead of overflowing (as the CPU kernels do).
template <class T, bool = std::is_integral_v<T> && !std::is_same_v<T, bool>>
struct wrap {
  using type = T;
};
template <class T>
struct wrap<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using wrap_t = typename wrap<T>::type;

/// The offset of output element i in operand k under plan p.
__device__ __forceinline__ int64_t plan_offset(const index_plan& p, int k, int64_t i) {
  if (p.rank == 1) return i * p.strides[k][0];
  int64_t off = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    const int64_t n = p.dims[d];
    off += (i % n) * p.strides[k][d];
    i /= n;
  }
  return off;
}

/// Calls f(T{}) with the C++ type of t (host side, in the launchers).
template <class F>
void dispatch(dtype t, F&& f) {
  switch (t) {
    case dtype::float32:
      return f(float{});
    case dtype::float64:
      return f(double{});
    case dtype::int32:
      return f(int32_t{});
    case dtype::int64:
      return f(int64_t{});
    case dtype::uint8:
      return f(uint8_t{});
    case dtype::boolean:
      return f(bool{});
    case dtype::bfloat16:  // placement keeps bfloat16 nodes on the CPU
                           // (actors/compile/placement.cpp)
      fail_no_bfloat16_kernel("gpu kernel");
  }
}

/// Calls f(T{}) for float32 and float64 only.
template <class F>
void dispatch_float(dtype t, F&& f) {
  if (t == dtype::float32) f(float{});
  if (t == dtype::float64) f(double{});
}

/// Calls f(U{}) with an unsigned type of elem_size bytes (1, 2, 4 or 8): copies only move
/// bytes, so one instantiation per element size serves every dtype.
template <class F>
void dispatch_size(size_t elem_size, F&& f) {
  switch (elem_size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
  }
}

}  // namespace actorflow::gpu::kernels
