// GCC 12 reports false "(may be) used uninitialized" warnings inside its own AVX-512 intrinsics
// as Eigen's vectorized exp and reductions inline them; the pragma's state at the intrinsics'
// location is what counts, so it comes before any include.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "ops/softmax.hpp"

#include <algorithm>
#include <cmath>

#include "ops/array.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/reduce.hpp"

namespace actorflow {

namespace {

template <class T>
using row_map = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using mutable_row_map = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

// Elements per task: exp costs more than an add, so rows are split sooner than element-wise ops.
constexpr int64_t row_grain_elements = 8 * 1024;

// Calls fn(r) for every row r < rows of `cols` elements, in parallel above the grain.
template <class F>
void for_each_row(int64_t rows, int64_t cols, F&& fn) {
  const int64_t grain = std::max<int64_t>(1, row_grain_elements / std::max<int64_t>(1, cols));
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) fn(r);
  });
}

int64_t merge_dim(int64_t x, int64_t y) { return x < 0 ? y : x; }

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax

std::vector<tensor_spec> softmax_infer(const shape_context& c) {
  auto& x = c.inputs[0];
  if (x.type == dtype::bfloat16) fail_no_bfloat16_kernel(c.op);
  if (!is_floating(x.type))
    c.fail(std::string("expects float32 or float64 logits, got ") + dtype_name(x.type));
  if (x.dims.rank() < 1) c.fail("expects logits of rank >= 1, got a scalar ()");
  return {x};
}

template <bool Log>
void softmax_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  if (x.rank() < 1) ctx.fail("expects logits of rank >= 1, got a scalar ()");
  tensor& out = ctx.allocate_output(0, x.type(), x.dims());
  const int64_t cols = x.dims().dim(-1);
  if (x.num_elements() == 0) return;
  const int64_t rows = x.num_elements() / cols;
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    T* dst = out.mutable_data<T>();
    for_each_row(rows, cols, [&](int64_t r) {
      row_map<T> in(src + r * cols, cols);
      mutable_row_map<T> y(dst + r * cols, cols);
      const T m = in.maxCoeff();
      if constexpr (Log) {
        y = in - m;
        y -= std::log(y.exp().sum());
      } else {
        y = (in - m).exp();
        y *= T(1) / y.sum();
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------
// softmax_cross_entropy_with_logits

std::vector<tensor_spec> xent_infer(const shape_context& c) {
  auto& logits = c.inputs[0];
  auto& labels = c.inputs[1];
  if (logits.type == dtype::bfloat16) fail_no_bfloat16_kernel(c.op);
  if (!is_floating(logits.type))
    c.fail(std::string("expects float32 or float64 logits, got ") + dtype_name(logits.type));
  if (labels.type != logits.type)
    c.fail("logits " + logits.to_string() + " and labels " + labels.to_string() +
           " have different dtypes");
  if (logits.dims.rank() != 2 || labels.dims.rank() != 2)
    c.fail("expects logits and labels of rank 2 [batch, classes], got " + logits.dims.to_string() +
           " and " + labels.dims.to_string());
  if (!logits.dims.compatible_with(labels.dims))
    c.fail("logits " + logits.dims.to_string() + " and labels " + labels.dims.to_string() +
           " differ in shape");
  const int64_t batch = merge_dim(logits.dims[0], labels.dims[0]);
  const int64_t classes = merge_dim(logits.dims[1], labels.dims[1]);
  return {{logits.type, shape{batch}}, {logits.type, shape{batch, classes}}};
}

void xent_kernel(kernel_context& ctx) {
  const tensor& logits = ctx.input(0);
  const tensor& labels = ctx.input(1);
  if (logits.rank() != 2 || logits.dims() != labels.dims())
    ctx.fail("logits " + logits.dims().to_string() + " and labels " + labels.dims().to_string() +
             " must both be [batch, classes]");
  const int64_t rows = logits.dims()[0], cols = logits.dims()[1];
  // Allocated before either is referenced: allocating output 1 may move output 0.
  ctx.allocate_output(0, logits.type(), shape{rows});
  ctx.allocate_output(1, logits.type(), logits.dims());
  tensor& loss = ctx.outputs[0];
  tensor& backprop = ctx.outputs[1];
  visit_floating(logits.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const T* p = labels.data<T>();
    T* l = loss.mutable_data<T>();
    T* g = backprop.mutable_data<T>();
    if (cols == 0) {
      std::fill(l, l + rows, T(0));
      return;
    }
    for_each_row(rows, cols, [&](int64_t r) {
      row_map<T> in(x + r * cols, cols);
      row_map<T> target(p + r * cols, cols);
      mutable_row_map<T> grad(g + r * cols, cols);
      const T m = in.maxCoeff();
      grad = (in - m).exp();
      const T sum = grad.sum();
      // loss = sum(p * (log(sum(exp(x))) - x)) with log(sum(exp(x))) = m + log(sum), written
      // as log(sum) - (x - m) so that no large terms cancel; every term is finite.
      const T log_sum = std::log(sum);
      l[r] = (target * (log_sum - (in - m))).sum();
      grad = grad * (T(1) / sum) - target;
    });
  });
}

// ---------------------------------------------------------------------------------------------
// sparse_softmax_cross_entropy_with_logits

std::vector<tensor_spec> sparse_xent_infer(const shape_context& c) {
  auto& logits = c.inputs[0];
  auto& labels = c.inputs[1];
  if (logits.type == dtype::bfloat16) fail_no_bfloat16_kernel(c.op);
  if (!is_floating(logits.type))
    c.fail(std::string("expects float32 or float64 logits, got ") + dtype_name(logits.type));
  if (labels.type != dtype::int32 && labels.type != dtype::int64)
    c.fail(std::string("expects int32 or int64 labels, got ") + dtype_name(labels.type));
  if (logits.dims.rank() != 2 || labels.dims.rank() != 1)
    c.fail("expects logits [batch, classes] and labels [batch], got " + logits.dims.to_string() +
           " and " + labels.dims.to_string());
  if (logits.dims[0] >= 0 && labels.dims[0] >= 0 && logits.dims[0] != labels.dims[0])
    c.fail("logits " + logits.dims.to_string() + " and labels " + labels.dims.to_string() +
           " differ in batch size");
  const int64_t batch = merge_dim(logits.dims[0], labels.dims[0]);
  return {{logits.type, shape{batch}}, {logits.type, shape{batch, logits.dims[1]}}};
}

void sparse_xent_kernel(kernel_context& ctx) {
  const tensor& logits = ctx.input(0);
  const tensor& labels = ctx.input(1);
  if (logits.rank() != 2 || labels.rank() != 1 || labels.dims()[0] != logits.dims()[0])
    ctx.fail("expects logits [batch, classes] and labels [batch], got " +
             logits.dims().to_string() + " and " + labels.dims().to_string());
  const int64_t rows = logits.dims()[0], cols = logits.dims()[1];
  // Every label is checked before any work, so a bad one fails the run with a clear message.
  std::vector<int64_t> index(static_cast<size_t>(rows));
  auto read_labels = [&](auto tag) {
    using L = decltype(tag);
    const L* lab = labels.data<L>();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t v = static_cast<int64_t>(lab[r]);
      if (v < 0 || v >= cols)
        ctx.fail("label " + std::to_string(v) + " at row " + std::to_string(r) +
                 " is out of range for " + std::to_string(cols) + " classes (valid: [0, " +
                 std::to_string(cols) + "))");
      index[static_cast<size_t>(r)] = v;
    }
  };
  if (labels.type() == dtype::int32)
    read_labels(int32_t{});
  else if (labels.type() == dtype::int64)
    read_labels(int64_t{});
  else
    ctx.fail(std::string("expects int32 or int64 labels, got ") + dtype_name(labels.type()));
  // Allocated before either is referenced: allocating output 1 may move output 0.
  ctx.allocate_output(0, logits.type(), shape{rows});
  ctx.allocate_output(1, logits.type(), logits.dims());
  tensor& loss = ctx.outputs[0];
  tensor& backprop = ctx.outputs[1];
  visit_floating(logits.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* l = loss.mutable_data<T>();
    T* g = backprop.mutable_data<T>();
    for_each_row(rows, cols, [&](int64_t r) {
      row_map<T> in(x + r * cols, cols);
      mutable_row_map<T> grad(g + r * cols, cols);
      const int64_t target = index[static_cast<size_t>(r)];
      const T m = in.maxCoeff();
      grad = (in - m).exp();
      const T sum = grad.sum();
      l[r] = std::log(sum) - (in[target] - m);
      grad *= T(1) / sum;
      grad[target] -= T(1);
    });
  });
}

// ---------------------------------------------------------------------------------------------
// gradients (TensorFlow's nn_grad.py), from the forward outputs

output sum_last(output x) { return reduce_sum(x, {-1}, true); }

// y = softmax(x): dx = (dy - sum(dy * y)) * y along the last axis.
void softmax_grad(grad_context& c) {
  auto y = c.outputs[0], dy = c.grad();
  c.input_grads = {mul(sub(dy, sum_last(mul(dy, y))), y)};
}

// y = log_softmax(x): dx = dy - softmax(x) * sum(dy) along the last axis.
void log_softmax_grad(grad_context& c) {
  auto dy = c.grad();
  c.input_grads = {sub(dy, mul(exp(c.outputs[0]), sum_last(dy)))};
}

// The driver fills in zeros_like for an output that got no gradient: the
// backprop output usually does not, and its term is then skipped.
bool is_zeros(const output& grad) { return grad.node().op == "zeros_like"; }

// The logits' gradient: the forward's own backprop scaled by each row's loss
// gradient, plus (for second-order use) the gradient through the backprop output.
output xent_logits_grad(grad_context& c) {
  auto dlogits = mul(c.outputs[1], expand_dims(c.grad(0), -1));
  if (is_zeros(c.grad(1))) return dlogits;
  auto g = c.grad(1), p = softmax(c.input(0));
  return add(dlogits, mul(sub(g, sum_last(mul(g, p))), p));
}

// loss = -sum(labels * log_softmax(logits)), backprop = softmax(logits) - labels.
void xent_grad(grad_context& c) {
  auto dlogits = xent_logits_grad(c);
  auto dlabels = mul(neg(expand_dims(c.grad(0), -1)), log_softmax(c.input(0)));
  if (!is_zeros(c.grad(1))) dlabels = sub(dlabels, c.grad(1));
  c.input_grads = {dlogits, dlabels};
}

// Class indices have no gradient.
void sparse_xent_grad(grad_context& c) { c.input_grads = {xent_logits_grad(c), output()}; }

const op_registrar registrations[] = {
    op_registrar({.name = "softmax",
                  .num_inputs = 1,
                  .infer = softmax_infer,
                  .kernel = softmax_kernel<false>,
                  .summary = "exp(x) / sum(exp(x)) along the last axis",
                  .gradient = softmax_grad}),
    op_registrar({.name = "log_softmax",
                  .num_inputs = 1,
                  .infer = softmax_infer,
                  .kernel = softmax_kernel<true>,
                  .summary = "x - log(sum(exp(x))) along the last axis",
                  .gradient = log_softmax_grad}),
    op_registrar({.name = "softmax_cross_entropy_with_logits",
                  .num_inputs = 2,
                  .infer = xent_infer,
                  .kernel = xent_kernel,
                  .summary = "per-row cross-entropy of softmax(logits) against label "
                             "distributions, and its gradient",
                  .gradient = xent_grad}),
    op_registrar({.name = "sparse_softmax_cross_entropy_with_logits",
                  .num_inputs = 2,
                  .infer = sparse_xent_infer,
                  .kernel = sparse_xent_kernel,
                  .summary = "per-row cross-entropy of softmax(logits) against class indices, "
                             "and its gradient",
                  .gradient = sparse_xent_grad}),
};

}  // namespace

output softmax(output logits, const std::string& name) {
  return make_op("softmax", {logits}, {}, name);
}

output log_softmax(output logits, const std::string& name) {
  return make_op("log_softmax", {logits}, {}, name);
}

cross_entropy softmax_cross_entropy_with_logits(output logits, output labels,
                                                const std::string& name) {
  auto outs = make_op_outputs("softmax_cross_entropy_with_logits", {logits, labels}, {}, name);
  return {outs[0], outs[1]};
}

cross_entropy sparse_softmax_cross_entropy_with_logits(output logits, output labels,
                                                       const std::string& name) {
  auto outs =
      make_op_outputs("sparse_softmax_cross_entropy_with_logits", {logits, labels}, {}, name);
  return {outs[0], outs[1]};
}

}  // namespace actorflow
