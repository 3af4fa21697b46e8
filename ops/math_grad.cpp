// Derivative helpers of the unary math ops (TensorFlow's ReluGrad, SigmoidGrad, ...).
// Each takes two same-shape, same-dtype tensors; no broadcasting, as in TensorFlow.
#include "ops/array.hpp"
#include "ops/math.hpp"
#include "ops/math_detail.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

using namespace math_detail;

// The merged partial shape: a dim known on either side is known.
template <dtypes Set>
std::vector<tensor_spec> infer_same_shape(const shape_context& c) {
  auto& a = c.inputs[0];
  auto& b = c.inputs[1];
  check_same_dtype(c.op, a.type, b.type);
  check_dtype(c.op, Set, a.type);
  if (!a.dims.compatible_with(b.dims))
    c.fail("shapes " + a.dims.to_string() + " and " + b.dims.to_string() + " differ");
  shape out = a.dims;
  for (int i = 0; i < out.rank(); ++i)
    if (out[i] == shape::unknown) out[i] = b.dims[i];
  return {{a.type, out}};
}

// Runs seg(const T* a, const T* b, T* out, n) over flat segments of two same-shape inputs.
template <dtypes Set, class MakeSeg>
kernel_fn same_shape_kernel(MakeSeg make_seg) {
  return [make_seg](kernel_context& ctx) {
    const tensor& a = ctx.input(0);
    const tensor& b = ctx.input(1);
    check_same_dtype(ctx.op, a.type(), b.type());
    if (a.dims() != b.dims())
      ctx.fail("shapes " + a.dims().to_string() + " and " + b.dims().to_string() + " differ");
    visit_set<Set>(a.type(), ctx.op, [&](auto tag) {
      using T = decltype(tag);
      tensor& out = ctx.allocate_output(0, a.type(), a.dims());
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out.mutable_data<T>();
      auto seg = make_seg(tag);
      parallel_for(a.num_elements(), cheap_grain,
                   [&](int64_t s, int64_t e) { seg(pa + s, pb + s, po + s, e - s); });
    });
  };
}

// A float helper f(y, dy) written as an Eigen array expression.
template <class F>
kernel_fn float_grad(F f) {
  return same_shape_kernel<dtypes::floating>([f](auto tag) {
    using T = decltype(tag);
    return [f](const T* y, const T* dy, T* out, int64_t n) {
      Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> ym(y, n), dym(dy, n);
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> o(out, n);
      o = f(ym, dym, T(0));
    };
  });
}

// Second-order gradients. g is the gradient of the helper's output; y the forward
// output of the op the helper differentiates.
void relu_grad_grad(grad_context& c) {
  c.input_grads = {relu_grad(c.grad(), c.input(1)), zeros_like(c.input(1))};
}
// out = dy * y * (1 - y): d/dy = g * dy * (1 - 2y).
void sigmoid_grad_grad(grad_context& c) {
  auto y = c.input(0), dy = c.input(1), g = c.grad();
  c.input_grads = {mul(mul(g, dy), sub(scalar_like(y, 1), mul(scalar_like(y, 2), y))),
                   sigmoid_grad(y, g)};
}
// out = dy * (1 - y^2): d/dy = -2 g dy y.
void tanh_grad_grad(grad_context& c) {
  auto y = c.input(0), dy = c.input(1), g = c.grad();
  c.input_grads = {mul(mul(g, dy), mul(scalar_like(y, -2), y)), tanh_grad(y, g)};
}
// out = 0.5 dy / y: d/dy = -g out / y.
void sqrt_grad_grad(grad_context& c) {
  auto y = c.input(0), g = c.grad();
  c.input_grads = {neg(div(mul(g, c.outputs[0]), y)), sqrt_grad(y, g)};
}
// out = -0.5 dy y^3: d/dy = 3 g out / y.
void rsqrt_grad_grad(grad_context& c) {
  auto y = c.input(0), g = c.grad();
  c.input_grads = {mul(scalar_like(y, 3), div(mul(g, c.outputs[0]), y)), rsqrt_grad(y, g)};
}
// out = -dy y^2: d/dy = -2 g dy y.
void reciprocal_grad_grad(grad_context& c) {
  auto y = c.input(0), dy = c.input(1), g = c.grad();
  c.input_grads = {mul(mul(g, dy), mul(scalar_like(y, -2), y)), reciprocal_grad(y, g)};
}

const op_registrar registrations[] = {
    op_registrar({.name = "relu_grad",
                  .num_inputs = 2,
                  .infer = infer_same_shape<dtypes::numeric>,
                  .kernel = same_shape_kernel<dtypes::numeric>([](auto tag) {
                    using T = decltype(tag);
                    return [](const T* __restrict dy, const T* __restrict x, T* __restrict out,
                              int64_t n) {
                      for (int64_t i = 0; i < n; ++i) out[i] = x[i] > T(0) ? dy[i] : T(0);
                    };
                  }),
                  .summary = "dy where x > 0, else 0",
                  .gradient = relu_grad_grad}),
    // `zero` only carries the element type into the generic lambdas.
    op_registrar({.name = "sigmoid_grad",
                  .num_inputs = 2,
                  .infer = infer_same_shape<dtypes::floating>,
                  .kernel = float_grad([](const auto& y, const auto& dy, auto zero) {
                    using T = decltype(zero);
                    return dy * y * (T(1) - y);
                  }),
                  .summary = "dy * y * (1 - y)",
                  .gradient = sigmoid_grad_grad}),
    op_registrar({.name = "tanh_grad",
                  .num_inputs = 2,
                  .infer = infer_same_shape<dtypes::floating>,
                  .kernel = float_grad([](const auto& y, const auto& dy, auto zero) {
                    using T = decltype(zero);
                    return dy * (T(1) - y * y);
                  }),
                  .summary = "dy * (1 - y * y)",
                  .gradient = tanh_grad_grad}),
    op_registrar({.name = "sqrt_grad",
                  .num_inputs = 2,
                  .infer = infer_same_shape<dtypes::floating>,
                  .kernel = float_grad([](const auto& y, const auto& dy, auto zero) {
                    using T = decltype(zero);
                    return dy * T(0.5) / y;
                  }),
                  .summary = "dy * 0.5 / y",
                  .gradient = sqrt_grad_grad}),
    op_registrar({.name = "rsqrt_grad",
                  .num_inputs = 2,
                  .infer = infer_same_shape<dtypes::floating>,
                  .kernel = float_grad([](const auto& y, const auto& dy, auto zero) {
                    using T = decltype(zero);
                    return dy * T(-0.5) * y * y * y;
                  }),
                  .summary = "dy * -0.5 * y^3",
                  .gradient = rsqrt_grad_grad}),
    op_registrar(
        {.name = "reciprocal_grad",
         .num_inputs = 2,
         .infer = infer_same_shape<dtypes::floating>,
         .kernel = float_grad([](const auto& y, const auto& dy, auto zero) { return -dy * y * y; }),
         .summary = "-dy * y * y",
         .gradient = reciprocal_grad_grad}),
};

}  // namespace

output relu_grad(output dy, output x, const std::string& name) {
  return make_op("relu_grad", {dy, x}, {}, name);
}
output sigmoid_grad(output y, output dy, const std::string& name) {
  return make_op("sigmoid_grad", {y, dy}, {}, name);
}
output tanh_grad(output y, output dy, const std::string& name) {
  return make_op("tanh_grad", {y, dy}, {}, name);
}
output sqrt_grad(output y, output dy, const std::string& name) {
  return make_op("sqrt_grad", {y, dy}, {}, name);
}
output rsqrt_grad(output y, output dy, const std::string& name) {
  return make_op("rsqrt_grad", {y, dy}, {}, name);
}
output reciprocal_grad(output y, output dy, const std::string& name) {
  return make_op("reciprocal_grad", {y, dy}, {}, name);
}

}  // namespace actorflow
