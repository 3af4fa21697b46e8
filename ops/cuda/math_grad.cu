// The derivative helpers of the unary math ops (ops/math_grad.cpp's formulas):
// relu_grad(dy, x), and sigmoid_grad, tanh_grad, sqrt_grad, rsqrt_grad and
// reciprocal_grad(y, dy), over two tensors of one shape.
#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

template <class T>
__device__ T derivative_value(derivative_op op, T a, T b) {
  if (op == derivative_op::relu) return b > T(0) ? a : T(0);  // (dy, x)
  // The others are registered for floats only.
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {  // (y, dy)
      case derivative_op::sigmoid:
        return b * a * (T(1) - a);
      case derivative_op::tanh:
        return b * (T(1) - a * a);
      case derivative_op::sqrt:
        return b * T(0.5) / a;
      case derivative_op::rsqrt:
        return b * T(-0.5) * a * a * a;
      case derivative_op::reciprocal:
        return -b * a * a;
      default:
        break;
    }
  }
  return T(0);
}

template <class T>
__global__ void derivative_kernel(derivative_op op, const T* __restrict__ a,
                                  const T* __restrict__ b, T* __restrict__ out, int64_t n) {
  AF_GRID_LOOP(i, n) out[i] = derivative_value(op, a[i], b[i]);
}

}  // namespace

void derivative(derivative_op op, dtype t, const void* a, const void* b, void* out, int64_t n,
                cudaStream_t s) {
  if (n == 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      derivative_kernel<T><<<blocks_for(n), block_threads, 0, s>>>(
          op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n);
    }
  });
  note_launch();
}

}  // namespace actorflow::gpu::kernels
