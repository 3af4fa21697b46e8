// matmul through cuBLAS. cuBLAS is column-major; a row-major matrix is its
// column-major transpose, so row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T: the operands swap places and keep their
// transpose flags, and nothing is transposed in memory. Batches go through
// one strided-batched call, a stride of 0 sharing a rank-2 operand.
#include <limits>

#include "ops/cuda/glue.hpp"

namespace actorflow::gpu {

namespace {

int as_int(int64_t v, const std::string& op) {
  if (v > std::numeric_limits<int>::max())
    fail(op, "dimension " + std::to_string(v) + " is too large for cuBLAS");
  return static_cast<int>(v);
}

cublasComputeType_t float_compute(gpu_math math) {
  switch (math) {
    case gpu_math::tf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case gpu_math::bf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case gpu_math::fp32:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

void matmul_kernel(gpu_kernel_context& ctx) {
  const device_tensor& a = ctx.input(0);
  const device_tensor& b = ctx.input(1);
  const bool ta = ctx.attr_or<bool>("transpose_a", false);
  const bool tb = ctx.attr_or<bool>("transpose_b", false);
  // The shape function has validated the operands; this reads the geometry.
  const int64_t m = ta ? a.dims().dim(-1) : a.dims().dim(-2);
  const int64_t k = ta ? a.dims().dim(-2) : a.dims().dim(-1);
  const int64_t n = tb ? b.dims().dim(-2) : b.dims().dim(-1);
  const bool a_batched = a.rank() > 2, b_batched = b.rank() > 2;
  device_tensor& c = ctx.allocate_output(0);
  if (c.num_elements() == 0) return;
  const int64_t batch = c.num_elements() / (m * n);
  if (k == 0) {
    kernels::fill(c.type(), 0, c.raw_mutable_data(), c.num_elements(), stream_of(ctx));
    return;
  }
  // [batch, M, K] x [K, N] is one [batch * M, K] x [K, N] product.
  const bool fold = a_batched && !b_batched && !ta;
  const int64_t rows = fold ? batch * m : m;
  const int64_t count = fold ? 1 : batch;
  const long long stride_a = a_batched && !fold ? m * k : 0;
  const long long stride_b = b_batched ? k * n : 0;
  const long long stride_c = rows * n;

  const bool is_double = a.type() == dtype::float64;
  const cudaDataType_t type = is_double ? CUDA_R_64F : CUDA_R_32F;
  const cublasComputeType_t compute = is_double ? CUBLAS_COMPUTE_64F : float_compute(ctx.math);
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const void* one = is_double ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = is_double ? static_cast<const void*>(&zero_d) : &zero_f;
  // Column-major: C^T [n x rows] = op(B)^T [n x k] * op(A)^T [k x rows].
  check_cublas(
      cublasGemmStridedBatchedEx(
          ctx.stream.cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
          as_int(n, ctx.op), as_int(rows, ctx.op), as_int(k, ctx.op), one, b.raw_data(), type,
          as_int(tb ? k : n, ctx.op), stride_b, a.raw_data(), type, as_int(ta ? rows : k, ctx.op),
          stride_a, zero, c.raw_mutable_data(), type, as_int(n, ctx.op), stride_c,
          as_int(count, ctx.op), compute, CUBLAS_GEMM_DEFAULT),
      ctx.op, "cublasGemmStridedBatchedEx");
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "matmul",
                          .types = float_types,
                          .kernel = matmul_kernel,
                          .note = "cuBLAS; float32 is exact float32 unless the device's gpu_math "
                                  "asks for TF32 or BF16 products; integer matmul stays on the "
                                  "CPU"}),
};

}  // namespace

}  // namespace actorflow::gpu
