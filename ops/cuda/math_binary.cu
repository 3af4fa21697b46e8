// Binary math with NumPy broadcasting (through an index plan) and select
// (ops/math_binary.cpp's formulas).
//
// One kernel per element type: the op is a uniform switch inside it, which
// costs nothing next to the memory traffic and keeps the number of
// instantiations (and the build time) small.
#include <cmath>

#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

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

}  // namespace actorflow::gpu::kernels
