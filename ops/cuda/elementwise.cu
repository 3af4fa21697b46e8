// Element-wise kernels: unary math, binary math with NumPy broadcasting (through
// an index plan), select, cast, fill, and the strided copies (gather,
// copy_window) that broadcasting, transposes and layout changes use.
//
// One kernel per element type: the op is a uniform switch inside it, which
// costs nothing next to the memory traffic and keeps the number of
// instantiations (and the build time) small. Each formula is the CPU kernel's
// (ops/math_unary.cpp, math_binary.cpp, math_grad.cpp).
#include <cmath>
#include <limits>

#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

// ---- unary ----------------------------------------------------------------------------------

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

// ---- binary ---------------------------------------------------------------------------------

template <class T>
__device__ T arithmetic_value(binary_op op, T a, T b) {
  using W = wrap_t<T>;
  switch (op) {
    case binary_op::add:
      return static_cast<T>(W(a) + W(b));
    case binary_op::sub:
      return static_cast<T>(W(a) - W(b));
    case binary_op::mul:
      return static_cast<T>(W(a) * W(b));
    case binary_op::maximum:
      return (a > b || is_nan(a)) ? a : b;
    case binary_op::minimum:
      return (a < b || is_nan(a)) ? a : b;
    case binary_op::relu_grad:  // (dy, x)
      return b > T(0) ? a : T(0);
    default:
      break;
  }
  // Integer div and pow stay on the CPU, which checks their divisors and exponents.
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case binary_op::div:
        return a / b;
      case binary_op::pow:
        return b == T(2) ? a * a : pow(a, b);
      case binary_op::sigmoid_grad:  // (y, dy)
        return b * a * (T(1) - a);
      case binary_op::tanh_grad:
        return b * (T(1) - a * a);
      case binary_op::sqrt_grad:
        return b * T(0.5) / a;
      case binary_op::rsqrt_grad:
        return b * T(-0.5) * a * a * a;
      case binary_op::reciprocal_grad:
        return -b * a * a;
      default:
        break;
    }
  }
  return T(0);
}

template <class T>
__device__ bool predicate_value(binary_op op, T a, T b) {
  switch (op) {
    case binary_op::equal:
      return a == b;
    case binary_op::not_equal:
      return a != b;
    case binary_op::less:
      return a < b;
    case binary_op::less_equal:
      return a <= b;
    case binary_op::greater:
      return a > b;
    case binary_op::greater_equal:
      return a >= b;
    case binary_op::logical_and:
      return a && b;
    case binary_op::logical_or:
      return a || b;
    default:
      return false;
  }
}

template <class T, class R>
__global__ void binary_kernel(binary_op op, const T* __restrict__ a, const T* __restrict__ b,
                              R* __restrict__ out, index_plan p, int64_t n) {
  AF_GRID_LOOP(i, n) {
    const T x = a[plan_offset(p, 0, i)];
    const T y = b[plan_offset(p, 1, i)];
    if constexpr (std::is_same_v<R, bool>)
      out[i] = predicate_value(op, x, y);
    else
      out[i] = arithmetic_value(op, x, y);
  }
}

template <class T>
__global__ void select_kernel(const bool* __restrict__ c, const T* __restrict__ a,
                              const T* __restrict__ b, T* __restrict__ out, index_plan p,
                              int64_t n) {
  AF_GRID_LOOP(i, n) {
    out[i] = c[plan_offset(p, 0, i)] ? a[plan_offset(p, 1, i)] : b[plan_offset(p, 2, i)];
  }
}

// ---- cast, fill -----------------------------------------------------------------------------

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

}  // namespace

bool writes_bool(binary_op op) {
  switch (op) {
    case binary_op::equal:
    case binary_op::not_equal:
    case binary_op::less:
    case binary_op::less_equal:
    case binary_op::greater:
    case binary_op::greater_equal:
    case binary_op::logical_and:
    case binary_op::logical_or:
      return true;
    default:
      return false;
  }
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

void binary(binary_op op, dtype t, const void* a, const void* b, void* out, const index_plan& plan,
            int64_t n, cudaStream_t s) {
  if (n == 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    if (writes_bool(op)) {
      binary_kernel<T, bool>
          <<<blocks_for(n), block_threads, 0, s>>>(op, pa, pb, static_cast<bool*>(out), plan, n);
    } else if constexpr (!std::is_same_v<T, bool>) {
      binary_kernel<T, T>
          <<<blocks_for(n), block_threads, 0, s>>>(op, pa, pb, static_cast<T*>(out), plan, n);
    }
  });
  note_launch();
}

void select(dtype t, const bool* cond, const void* a, const void* b, void* out,
            const index_plan& plan, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    select_kernel<T><<<blocks_for(n), block_threads, 0, s>>>(
        cond, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), plan, n);
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
