// The fused products' epilogue (ops/epilogue.hpp): the bias added along the
// last dim and the activation applied in one pass over the product, as the
// CPU's fused_matmul does over each block of it.
#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

template <class T>
__global__ void bias_activation_kernel(T* __restrict__ y, const T* __restrict__ bias, int64_t cols,
                                       int64_t n, bool relu) {
  AF_GRID_LOOP(i, n) {
    const T v = y[i] + bias[i % cols];
    y[i] = relu && v < T(0) ? T(0) : v;
  }
}

}  // namespace

void bias_activation(dtype t, void* y, const void* bias, int64_t rows, int64_t cols, bool relu,
                     cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  if (t == dtype::float64)
    bias_activation_kernel<double><<<blocks_for(n), block_threads, 0, s>>>(
        static_cast<double*>(y), static_cast<const double*>(bias), cols, n, relu);
  else
    bias_activation_kernel<float><<<blocks_for(n), block_threads, 0, s>>>(
        static_cast<float*>(y), static_cast<const float*>(bias), cols, n, relu);
  note_launch();
}

}  // namespace actorflow::gpu::kernels
