// Unary math and cast (ops/math_unary.cpp's formulas and conversions).
//
// One kernel per element type: the op is a uniform switch inside it, which
// costs nothing next to the memory traffic and keeps the number of
// instantiations (and the build time) small.
#include <cmath>
#include <limits>

#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

template <class T>
__device__ T unary_value(unary_op op, T x) {
  if constexpr (std::is_same_v<T, bool>) {
    return !x;  // logical_not, the only unary op on bool
  } else {
    using W = wrap_t<T>;
    if constexpr (std::is_unsigned_v<T>) {
      return x;  // relu, the only unary op on uint8 besides cast
    } else {
      switch (op) {
        case unary_op::neg:
          if constexpr (std::is_floating_point_v<T>)
            return -x;  // 0 - x would give +0 for +0
          else
            return static_cast<T>(W(0) - W(x));
        case unary_op::abs:
          if constexpr (std::is_floating_point_v<T>)
            return fabs(x);
          else
            return x < T(0) ? static_cast<T>(W(0) - W(x)) : x;
        case unary_op::square:
          return static_cast<T>(W(x) * W(x));
        case unary_op::sign:
          // -0 gives +0, as in TensorFlow; NaN stays NaN.
          return x > T(0) ? T(1) : x < T(0) ? T(-1) : x == T(0) ? T(0) : x;
        case unary_op::relu:
          return x < T(0) ? T(0) : x;  // NaN passes through
        default:
          break;
      }
    }
    if constexpr (std::is_floating_point_v<T>) {
      switch (op) {
        case unary_op::exp:
          return exp(x);
        case unary_op::log:
          return log(x);
        case unary_op::sqrt:
          return sqrt(x);
        case unary_op::rsqrt:
          return rsqrt(x);
        case unary_op::reciprocal:
          return T(1) / x;
        case unary_op::sigmoid:
          // e^x / (1 + e^x) below 0 keeps the tiny results that e^-x's overflow loses.
          if (x < T(0)) {
            const T e = exp(x);
            return e / (T(1) + e);
          }
          return T(1) / (T(1) + exp(-x));
        case unary_op::tanh:
          return tanh(x);
        default:
          break;
      }
    }
    return x;
  }
}

template <class T>
__global__ void unary_kernel(unary_op op, const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  AF_GRID_LOOP(i, n) y[i] = unary_value(op, x[i]);
}

template <class To, class From>
__device__ To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    constexpr To lo = std::numeric_limits<To>::lowest();
    constexpr To hi = std::numeric_limits<To>::max();
    if (v != v) return To(0);
    if (v <= static_cast<From>(lo)) return lo;
    if (v >= static_cast<From>(hi)) return hi;
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <class From, class To>
__global__ void cast_kernel(const From* __restrict__ x, To* __restrict__ y, int64_t n) {
  AF_GRID_LOOP(i, n) y[i] = convert<To>(x[i]);
}

// float32 -> bfloat16 as core/bfloat16.hpp's to_bfloat16: round to nearest
// even, every NaN the quiet 0x7fc0; bfloat16 -> float32 exact.
__global__ void to_bfloat16_kernel(const uint32_t* __restrict__ x, uint16_t* __restrict__ y,
                                   int64_t n) {
  AF_GRID_LOOP(i, n) {
    uint32_t u = x[i];
    y[i] = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t(0x7fc0)
                                           : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

__global__ void from_bfloat16_kernel(const uint16_t* __restrict__ x, uint32_t* __restrict__ y,
                                     int64_t n) {
  AF_GRID_LOOP(i, n) y[i] = uint32_t{x[i]} << 16;
}

}  // namespace

void cast_bfloat16(dtype from, dtype to, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  if (from == dtype::float32 && to == dtype::bfloat16)
    to_bfloat16_kernel<<<blocks_for(n), block_threads, 0, s>>>(static_cast<const uint32_t*>(x),
                                                               static_cast<uint16_t*>(y), n);
  else
    from_bfloat16_kernel<<<blocks_for(n), block_threads, 0, s>>>(static_cast<const uint16_t*>(x),
                                                                 static_cast<uint32_t*>(y), n);
  note_launch();
}

void unary(unary_op op, dtype t, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<T><<<blocks_for(n), block_threads, 0, s>>>(op, static_cast<const T*>(x),
                                                            static_cast<T*>(y), n);
  });
  note_launch();
}

void cast(dtype from, dtype to, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  dispatch(from, [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch(to, [&](auto to_tag) {
      using To = decltype(to_tag);
      cast_kernel<From, To><<<blocks_for(n), block_threads, 0, s>>>(static_cast<const From*>(x),
                                                                    static_cast<To*>(y), n);
    });
  });
  note_launch();
}

}  // namespace actorflow::gpu::kernels
