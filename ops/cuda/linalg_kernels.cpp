// GPU kernels of the linalg family (ops/linalg.cpp): matmul through cuBLAS,
// bias_add and bias_add_grad.
//
// cuBLAS is column-major; a row-major matrix is its
// column-major transpose, so row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T: the operands swap places and keep their
// transpose flags, and nothing is transposed in memory. Batches go through
// strided-batched calls, a stride of 0 sharing a matrix: one call for equal
// batch dims or an operand shared whole, one per run of the batch when its
// dims broadcast (ops/geometry/matmul_batch.hpp).
#include <vector>

#include "ops/cuda/glue.hpp"
#include "ops/epilogue.hpp"
#include "ops/geometry/matmul_batch.hpp"

namespace actorflow::gpu {

namespace {

using namespace kernels;

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

// The operands of one strided-batched call, in the row-major terms of the product.
struct gemm_call {
  const char* a;
  const char* b;
  char* c;
  int64_t rows;                  // of op(a) and c: m, or batch * m when folded
  long long stride_a, stride_b;  // elements between a run's matrices (0: shared)
  int64_t count;
};

void gemm_strided(gpu_kernel_context& ctx, const gemm_call& call, cudaDataType_t type, int64_t n,
                  int64_t k, bool ta, bool tb) {
  const bool is_double = type == CUDA_R_64F;
  // bfloat16 operands: tensor cores, the products summed in float32 and
  // rounded to bfloat16 once, as the CPU's bfloat16 matmul does.
  const cublasComputeType_t compute = is_double             ? CUBLAS_COMPUTE_64F
                                      : type == CUDA_R_16BF ? CUBLAS_COMPUTE_32F
                                                            : float_compute(ctx.math);
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const void* one = is_double ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = is_double ? static_cast<const void*>(&zero_d) : &zero_f;
  const int64_t rows = call.rows;
  // Column-major: C^T [n x rows] = op(B)^T [n x k] * op(A)^T [k x rows].
  check_cublas(
      cublasGemmStridedBatchedEx(
          ctx.stream.cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
          as_int(n, ctx.op, "cuBLAS"), as_int(rows, ctx.op, "cuBLAS"), as_int(k, ctx.op, "cuBLAS"),
          one, call.b, type, as_int(tb ? k : n, ctx.op, "cuBLAS"), call.stride_b, call.a, type,
          as_int(ta ? rows : k, ctx.op, "cuBLAS"), call.stride_a, zero, call.c, type,
          as_int(n, ctx.op, "cuBLAS"), rows * n, as_int(call.count, ctx.op, "cuBLAS"), compute,
          CUBLAS_GEMM_DEFAULT),
      ctx.op, "cublasGemmStridedBatchedEx");
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
  const auto plan = geometry::plan_matmul_batch(
      a.dims(), b.dims(), a.dims().to_string() + " x " + b.dims().to_string());
  device_tensor& c = ctx.allocate_output(0);
  if (c.num_elements() == 0) return;
  if (k == 0) {
    check_cuda(cudaMemsetAsync(c.raw_mutable_data(), 0, c.size_bytes(), stream_of(ctx)), ctx.op,
               "cudaMemsetAsync");  // zeros of every float type, bfloat16's included
    return;
  }
  const bool is_double = a.type() == dtype::float64;
  const bool is_bfloat16 = a.type() == dtype::bfloat16;
  const cudaDataType_t type = is_double ? CUDA_R_64F : is_bfloat16 ? CUDA_R_16BF : CUDA_R_32F;
  const int64_t bytes = is_double ? 8 : is_bfloat16 ? 2 : 4;
  const auto* pa = static_cast<const char*>(a.raw_data());
  const auto* pb = static_cast<const char*>(b.raw_data());
  auto* pc = static_cast<char*>(c.raw_mutable_data());
  if (plan.runs() == 1 && plan.a_step == 1 && plan.b_step == 0 && !ta) {
    // a's matrices in order against one b: one [batch * M, K] x [K, N] product.
    gemm_strided(ctx, {pa, pb, pc, plan.count * m, 0, 0, 1}, type, n, k, ta, tb);
    return;
  }
  // One strided-batched call per run of the broadcast batch (geometry/matmul_batch.hpp):
  // a single call when the batch dims are equal or one side is shared whole.
  for (int64_t r = 0; r < plan.runs(); ++r) {
    const gemm_call call{pa + plan.a_start[size_t(r)] * m * k * bytes,
                         pb + plan.b_start[size_t(r)] * k * n * bytes,
                         pc + r * plan.run * m * n * bytes,
                         m,
                         plan.a_step * m * k,
                         plan.b_step * k * n,
                         plan.run};
    gemm_strided(ctx, call, type, n, k, ta, tb);
  }
}

// bias_add: a broadcasting add of a 1-D bias along the last dim (math_binary.cu's add).
void bias_add_kernel(gpu_kernel_context& ctx) {
  const device_tensor& v = ctx.input(0);
  const device_tensor& bias = ctx.input(1);
  auto plan = geometry::make_plan<2>({&v.dims(), &bias.dims()}, ctx.op);
  device_tensor& out = ctx.allocate_output(0);
  binary(binary_op::add, v.type(), v.raw_data(), bias.raw_data(), out.raw_mutable_data(),
         to_index_plan(plan, ctx.op), plan.num_elements, stream_of(ctx));
}

// bias_add_grad: the sum over every dim but the last (reduce_kernels.cpp's reduce_into).
void bias_add_grad_kernel(gpu_kernel_context& ctx) {
  const device_tensor& dy = ctx.input(0);
  std::vector<bool> red(static_cast<size_t>(dy.rank()), true);
  red.back() = false;
  reduce_into(ctx, reduce_op::sum, dy, red);
}

// fused_matmul (the graph optimizer's matmul + bias_add [+ relu]): cuBLAS's
// product, then the bias and the activation in one pass over it (linalg.cu).
void fused_matmul_kernel(gpu_kernel_context& ctx) {
  const bool relu =
      parse_activation(ctx.attr<std::string>("activation"), ctx.op) == activation::relu;
  matmul_kernel(ctx);
  device_tensor& y = ctx.outputs[0];
  const int64_t cols = y.dims().dim(-1);
  bias_activation(y.type(), y.raw_mutable_data(), ctx.input(2).raw_data(),
                  cols > 0 ? y.num_elements() / cols : 0, cols, relu, stream_of(ctx));
}

const gpu_kernel_registrar registrations[] = {
    gpu_kernel_registrar({.op = "matmul",
                          .types = with_bfloat16(float_types),
                          .kernel = matmul_kernel,
                          .bfloat16 = true,
                          .note = "cuBLAS; float32 is exact float32 unless the device's gpu_math "
                                  "asks for TF32 or BF16 products; bfloat16 operands run on "
                                  "tensor cores, summed in float32; integer matmul stays on the "
                                  "CPU"}),
    gpu_kernel_registrar(
        {.op = "fused_matmul", .types = float_types, .kernel = fused_matmul_kernel}),
    gpu_kernel_registrar({.op = "bias_add", .types = numeric_types, .kernel = bias_add_kernel}),
    gpu_kernel_registrar(
        {.op = "bias_add_grad", .types = numeric_types, .kernel = bias_add_grad_kernel}),
};

}  // namespace

}  // namespace actorflow::gpu
