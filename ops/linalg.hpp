// Linear algebra: matrix products and bias addition.
//
// Ops: matmul (attrs transpose_a, transpose_b), bias_add, bias_add_grad.
#pragma once
#include <cstdint>
#include <vector>

#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// a x b over the last two dims. a is [..., M, K] ([..., K, M] with transpose_a), b is
/// [..., K, N] ([..., N, K] with transpose_b); the result is [..., M, N]. The batch dims (all
/// but the last two) broadcast as NumPy's and TensorFlow's tf.linalg.matmul (BatchMatMulV2)
/// do: (1,3,4) x (2,4,5) and (3,4) x (2,4,5) give (2,3,5), (2,1,3,4) x (5,4,6) gives
/// (2,5,3,6); a shared matrix is read in place, not copied, and its gradient is summed over
/// the matrices that shared it. float32, float64, int32 and int64.
ACTORFLOW_API output matmul(output a, output b, bool transpose_a = false, bool transpose_b = false,
                            const std::string& name = "");
/// value [..., C] + bias [C], the bias added along the last dim.
ACTORFLOW_API output bias_add(output value, output bias, const std::string& name = "");
/// The gradient of bias_add with respect to the bias: dy [..., C] summed over all but the
/// last dim, giving [C].
ACTORFLOW_API output bias_add_grad(output dy, const std::string& name = "");

/// The CPU GEMM behind matmul, exposed for benchmarks and tests: c[M, N] = op(a) x op(b),
/// all row-major and contiguous, where op(a) is [M, K] (a stored [K, M] when transpose_a)
/// and op(b) is [K, N] (b stored [N, K] when transpose_b). Splits the product into a few
/// large blocks run with tbb::parallel_for in the current task arena.
template <class T>
void gemm(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, bool transpose_a,
          bool transpose_b);

template <class T>
struct epilogue;  // ops/epilogue.hpp

/// gemm, with a fused op's epilogue (bias, activation) over each block of c while the block
/// is in cache (float32: instantiated for the convolutions' 1x1 products).
template <class T>
void gemm(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, bool transpose_a,
          bool transpose_b, const epilogue<T>& ep);

/// Rows [r0, r1) of gemm's float product, into `rows` ((r1 - r0) x n, row-major), on the calling
/// thread: the block product gemm runs on each of its blocks (the CPU GEMM library's). Over one
/// of gemm_row_blocks' blocks it is the very call gemm makes, so each element has the bits gemm
/// (and matmul) give it. Over other rows the bits match where the library's sum over k does not
/// depend on the block's shape: oneDNN's on AVX-512 does not, its AVX2 kernels do (they sum a
/// block's last rows in another order).
void gemm_rows(const float* a, const float* b, float* rows, int64_t m, int64_t n, int64_t k,
               bool transpose_a, bool transpose_b, int64_t r0, int64_t r1);

/// The blocks of rows gemm computes a float m x n x k product in, one call each, as
/// boundaries 0 = r_0 < r_1 < ... = m: one block where it runs the product whole. Empty
/// where it splits the product by columns (an output wider than tall).
std::vector<int64_t> gemm_row_blocks(int64_t m, int64_t n, int64_t k);

}  // namespace actorflow
