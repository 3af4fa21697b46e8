// The CUDA kernels' launchers (CUDA builds only). The .cu files hold device
// code and these thin launchers, and nothing else: the shapes, validation and
// op semantics stay in the C++ glue (<family>_kernels.cpp), compiled by the
// host compiler. Each launcher enqueues on `s` and returns; launch errors are
// kept for cuda_device::launch to report (note_launch,
// devices/cuda/cuda_launch_errors.hpp). The sections follow the .cu files,
// each named after the CPU family file whose formulas it computes.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "devices/cuda/cuda_launch_errors.hpp"

namespace actorflow::gpu::kernels {

inline constexpr int max_dims = 8;

/// A walk over an output of `rank` dims in row-major order: element i of the
/// output reads element sum_d index_d(i) * strides[k][d] of operand k (a
/// stride of 0 broadcasts). Built from geometry::make_plan, which merges
/// dims, so rank is small.
struct index_plan {
  int rank = 0;
  int64_t dims[max_dims] = {};
  int64_t strides[3][max_dims] = {};
};

// ---- unary math and cast (math_unary.cu) ----------------------------------------------------

// clang-format off
enum class unary_op : int {
  neg, abs, exp, log, sqrt, rsqrt, square, sign, reciprocal, relu, sigmoid, tanh, logical_not
};
// clang-format on
/// y[i] = op(x[i]) for n elements of dtype t (the op's dtype set is checked by the caller).
void unary(unary_op op, dtype t, const void* x, void* y, int64_t n, cudaStream_t s);
/// y = x converted as ops/math_unary.cpp's cast does (floats to integers saturate, NaN -> 0).
void cast(dtype from, dtype to, const void* x, void* y, int64_t n, cudaStream_t s);
/// float32 -> bfloat16 (core/bfloat16.hpp's rounding, bit for bit) or bfloat16 -> float32.
void cast_bfloat16(dtype from, dtype to, const void* x, void* y, int64_t n, cudaStream_t s);

// ---- binary math and select (math_binary.cu) ------------------------------------------------

// clang-format off
enum class binary_op : int {
  add, sub, mul, div, maximum, minimum, pow,
  equal, not_equal, less, less_equal, greater, greater_equal, logical_and, logical_or
};
// clang-format on
/// True for the ops that write bool.
bool writes_bool(binary_op op);
/// out[i] = a op b over `plan` (operands 0 and 1); n output elements of dtype t (bool for
/// comparisons).
void binary(binary_op op, dtype t, const void* a, const void* b, void* out, const index_plan& plan,
            int64_t n, cudaStream_t s);
/// out[i] = cond ? a : b over `plan` (operands cond, a, b).
void select(dtype t, const bool* cond, const void* a, const void* b, void* out,
            const index_plan& plan, int64_t n, cudaStream_t s);

// ---- derivative helpers (math_grad.cu) ------------------------------------------------------

/// The helpers of ops/math_grad.cpp: relu_grad takes (dy, x), the others (y, dy).
enum class derivative_op : int { relu, sigmoid, tanh, sqrt, rsqrt, reciprocal };
/// out[i] = op(a[i], b[i]) over n elements of dtype t: the helpers take two tensors of one
/// shape (no broadcasting, as in TensorFlow).
void derivative(derivative_op op, dtype t, const void* a, const void* b, void* out, int64_t n,
                cudaStream_t s);

// ---- fills and strided copies (array_util.cu) -----------------------------------------------

/// y[i] = value converted to t.
void fill(dtype t, double value, void* y, int64_t n, cudaStream_t s);
/// y[i] = x[offset of output element i under plan operand 0], elements of elem_size bytes
/// (1, 2, 4 or 8): broadcasts and transposes.
void gather(size_t elem_size, const void* x, void* y, const index_plan& plan, int64_t n,
            cudaStream_t s);
/// y[offset under plan operand 1] = x[offset under plan operand 0] for each of the n
/// elements of the walk: a copy between two strided views (concat's and pad's
/// placement of an input into a window of the output).
void strided_copy(size_t elem_size, const void* x, void* y, const index_plan& plan, int64_t n,
                  cudaStream_t s);
/// NHWC window copy: out[n, y, x, c] = in[n, y - top, x - left, c] where that is inside the
/// input, else 0 (pads an image, or crops one with negative top / left).
void copy_window(size_t elem_size, const void* in, void* out, int64_t n, int64_t h, int64_t w,
                 int64_t c, int64_t out_h, int64_t out_w, int64_t top, int64_t left,
                 cudaStream_t s);

// ---- the fused products' epilogue (linalg.cu) ------------------------------------------------

/// y[r, c] = act(y[r, c] + bias[c]) for a [rows, cols] product (float32 or float64), act
/// relu or none.
void bias_activation(dtype t, void* y, const void* bias, int64_t rows, int64_t cols, bool relu,
                     cudaStream_t s);

// ---- rows by index (array_index.cu) ---------------------------------------------------------

/// out[o, j, c] = params[o, idx[j], c] for o < outer, j < n, c < inner; params has d rows
/// per o; the indices were checked on the host.
void gather_rows(size_t elem_size, const void* params, const int64_t* idx, void* out, int64_t outer,
                 int64_t d, int64_t n, int64_t inner, cudaStream_t s);
/// out[o, targets[r], c] += updates[o, sources[k], c] for k in [offsets[r], offsets[r + 1]),
/// in that order (the CPU's), for each of `rows` target rows; out has d rows per o and
/// updates n (dtype t, not bool).
void scatter_add_rows(dtype t, const void* updates, void* out, int64_t outer, int64_t d, int64_t n,
                      int64_t inner, const int64_t* targets, const int64_t* offsets,
                      const int64_t* sources, int64_t rows, cudaStream_t s);

// ---- random values (random.cu) --------------------------------------------------------------

/// n values of t (float32 or float64) uniform in [lo, hi), from ops/random.cpp's Philox
/// stream with key `key` at counter (position, invocation).
void random_uniform(dtype t, void* out, int64_t n, uint64_t invocation, uint64_t key, double lo,
                    double hi, cudaStream_t s);
/// n normal values (mean, stddev) redrawn beyond two stddev, as ops/random.cpp draws them.
void truncated_normal(dtype t, void* out, int64_t n, uint64_t invocation, uint64_t key, double mean,
                      double stddev, cudaStream_t s);

// ---- reductions (reduce.cu) -----------------------------------------------------------------

/// y[i] = x[i] * x[i] / 2 (float32 or float64): what l2_loss sums.
void half_squares(dtype t, const void* x, void* y, int64_t n, cudaStream_t s);

enum class reduce_op : int { sum, mean, max, min, prod };
/// How many parts R is split into for a (O, R, I) reduction (1: no temporary needed); fixed by
/// the shape alone, so results do not depend on the GPU.
int64_t reduce_parts(int64_t O, int64_t R, int64_t I);
/// out[o, i] = reduce over r of x[o, r, i] (R > 0); `partial` holds O * reduce_parts * I
/// elements of t when reduce_parts > 1. Integer means truncate, as on the CPU.
void reduce(reduce_op op, dtype t, const void* x, void* out, void* partial, int64_t O, int64_t R,
            int64_t I, cudaStream_t s);
/// out[o, i] = the first r at which x[o, r, i] is largest (smallest); NaN counts as largest.
void arg_reduce(bool is_max, dtype t, const void* x, int64_t* out, int64_t O, int64_t R, int64_t I,
                cudaStream_t s);

// ---- softmax cross-entropy (softmax.cu) -----------------------------------------------------

/// Per row of [rows, cols] logits: loss and backprop against label distributions (dtype t).
void xent(dtype t, const void* logits, const void* labels, void* loss, void* backprop, int64_t rows,
          int64_t cols, cudaStream_t s);
/// The same against class indices (int32 or int64); a label outside [0, cols) gives NaN
/// loss and backprop for its row (TensorFlow's GPU kernel does the same: no host check).
void sparse_xent(dtype t, dtype label_type, const void* logits, const void* labels, void* loss,
                 void* backprop, int64_t rows, int64_t cols, cudaStream_t s);

// ---- pooling (pool.cu) ----------------------------------------------------------------------

/// conv_detail::geometry (ops/geometry/conv_window.hpp), as plain numbers.
struct pool_geometry {
  int64_t n, h, w, c, kh, kw, sh, sw, oh, ow, pad_top, pad_left;
};
void pool_forward(bool is_max, dtype t, const void* x, void* y, const pool_geometry& g,
                  cudaStream_t s);
/// dx of max_pool: each input element gathers dy of the windows whose first maximum it is.
void max_pool_backward(dtype t, const void* x, const void* dy, void* dx, const pool_geometry& g,
                       cudaStream_t s);
void avg_pool_backward(dtype t, const void* dy, void* dx, const pool_geometry& g, cudaStream_t s);

// ---- optimizer updates (optimizers.cu) ------------------------------------------------------

/// What every update takes: n elements of dtype t, the learning rate as a device scalar
/// (float32 or float64, read on the GPU: no copy to the host), the L2 weight decay.
struct update_args {
  dtype t;
  int64_t n;
  const void* lr;
  dtype lr_type;
  double weight_decay;
  /// The optional gradient scale (clipping's), a device scalar; null: 1.
  const void* scale = nullptr;
  dtype scale_type = dtype::float32;
  /// A row update (lazy Adam, AdaGrad on rows): the gradient holds n / row_size rows, row r
  /// for the variable's row rows[r] (device memory); null: the gradient is dense.
  const int64_t* rows = nullptr;
  int64_t row_size = 1;
};
void apply_sgd(const update_args& a, void* w, const void* g, cudaStream_t s);
void apply_momentum(const update_args& a, void* w, const void* g, void* velocity, double mu,
                    bool nesterov, cudaStream_t s);
/// c1 = 1 - beta1^t, c2 = 1 - beta2^t.
void apply_adam(const update_args& a, void* w, const void* g, void* m, void* v, double beta1,
                double beta2, double c1, double c2, double epsilon, cudaStream_t s);
/// `momentum_slot` is null when momentum is 0.
void apply_rmsprop(const update_args& a, void* w, const void* g, void* mean_square,
                   void* momentum_slot, double rho, double epsilon, double mu, cudaStream_t s);
void apply_adagrad(const update_args& a, void* w, const void* g, void* accumulator, double epsilon,
                   cudaStream_t s);

}  // namespace actorflow::gpu::kernels
