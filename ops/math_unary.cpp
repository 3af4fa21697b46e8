// Unary element-wise math, logical_not and cast.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/array.hpp"
#include "ops/elementwise.hpp"
#include "ops/math.hpp"
#include "ops/math_detail.hpp"
#include "ops/op_util.hpp"
#include "ops/state.hpp"

namespace actorflow {

namespace {

using namespace math_detail;

template <dtypes Set>
std::vector<tensor_spec> infer_unary(const shape_context& c) {
  check_dtype(c.op, Set, c.inputs[0].type);
  return {c.inputs[0]};
}

// Float ops through Eigen's vectorized array functions (exp, tanh, logistic, ...),
// every element on the packet path (packet_seg). make_seg(T{}) builds the segment.
template <class MakeSeg>
kernel_fn eigen_kernel(MakeSeg make_seg) {
  return [make_seg](kernel_context& ctx) {
    visit_set<dtypes::floating>(ctx.input(0).type(), ctx.op, [&](auto tag) {
      using T = decltype(tag);
      unary_map<T, T>(ctx, costly_grain, make_seg(tag));
    });
  };
}

// ---- where Eigen's fast packet functions are wrong ---------------------------------------
// Found by running them over every float32 against std:: in double, and from their
// source for float64: the clamps of exp's argument flush results below the smallest
// normal to 0 (and give exp(-inf) = 5.6e-309 in float64), and exp(88.5f) is inf;
// log clamps denormal inputs to the smallest normal. Inputs outside the ranges
// below go to std:: instead (packet_seg).

// exp's packet path is right for x in [lo, hi].
template <class T>
constexpr T exp_lo = std::is_same_v<T, float> ? T(-87) : T(-708);
template <class T>
constexpr T exp_hi = std::is_same_v<T, float> ? T(88) : T(709);

const auto exp_seg = [](auto tag) {
  using T = decltype(tag);
  return packet_seg<T>([](const auto& x) { return x.exp(); }, exp_lo<T>, exp_hi<T>,
                       [](T x) { return std::exp(x); });
};

const auto log_seg = [](auto tag) {
  using T = decltype(tag);
  return packet_seg<T>([](const auto& x) { return x.log(); }, std::numeric_limits<T>::min(),
                       std::numeric_limits<T>::infinity(), [](T x) { return std::log(x); });
};

// Exact logistic: e^x / (1 + e^x) for x < 0 keeps the tiny results that
// 1 / (1 + e^-x) loses when e^-x overflows.
template <class T>
T exact_sigmoid(T x) {
  if (x < T(0)) {
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
  return T(1) / (T(1) + std::exp(-x));
}

// Eigen's logistic is exp(x) below -9 (float32) or 1 / (1 + exp(-x)): exp's range again.
const auto sigmoid_seg = [](auto tag) {
  using T = decltype(tag);
  return packet_seg<T>([](const auto& x) { return x.logistic(); }, exp_lo<T>,
                       std::numeric_limits<T>::infinity(), exact_sigmoid<T>);
};

// Eigen's rsqrt (an estimate and a Newton step, as TensorFlow's, within 3 ulp)
// is wrong for denormal inputs; 1 / sqrt(x) is 1.3x slower on 1M float32.
const auto rsqrt_seg = [](auto tag) {
  using T = decltype(tag);
  return packet_seg<T>([](const auto& x) { return x.rsqrt(); }, std::numeric_limits<T>::min(),
                       std::numeric_limits<T>::infinity(), [](T x) { return T(1) / std::sqrt(x); });
};

const auto tanh_seg = [](auto tag) {
  using T = decltype(tag);
  return packet_seg<T>([](const auto& x) { return x.tanh(); });
};

// Ops simple enough that a plain loop vectorizes; f is generic over the element type.
template <dtypes Set, class F>
kernel_fn scalar_kernel(F f) {
  return [f](kernel_context& ctx) {
    visit_set<Set>(ctx.input(0).type(), ctx.op, [&](auto tag) {
      using T = decltype(tag);
      unary_map<T, T>(ctx, cheap_grain, scalar_seg<T>([&f](T x) { return f(x); }));
    });
  };
}

// Value conversion for cast: float to integer truncates and saturates (NaN -> 0)
// instead of the undefined behaviour of an out-of-range static_cast.
template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    constexpr To lo = std::numeric_limits<To>::lowest();
    constexpr To hi = std::numeric_limits<To>::max();
    if (std::isnan(v)) return To(0);
    if (v <= static_cast<From>(lo)) return lo;
    // static_cast<From>(hi) rounds up to a power of two for wide To: >= covers it.
    if (v >= static_cast<From>(hi)) return hi;
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// Elements per chunk of a cast that goes through float32 (one buffer on the stack).
constexpr int64_t bfloat16_chunk = 1024;

// other -> bfloat16 as other -> float32 -> bfloat16, as TensorFlow converts (Eigen::bfloat16's
// constructors go through float); float32 itself through the vectorized conversion.
void cast_to_bfloat16(const tensor& x, tensor& out) {
  bfloat16* po = out.mutable_data<bfloat16>();
  if (x.type() == dtype::float32) {
    const float* px = x.data<float>();
    parallel_for(x.num_elements(), cheap_grain,
                 [&](int64_t b, int64_t e) { float_to_bfloat16(px + b, po + b, e - b); });
    return;
  }
  visit_dtype(x.type(), [&](auto tag) {
    using From = decltype(tag);
    const From* px = x.data<From>();
    parallel_for(x.num_elements(), cheap_grain, [&](int64_t b, int64_t e) {
      float buf[bfloat16_chunk];
      for (int64_t i = b; i < e; i += bfloat16_chunk) {
        const int64_t m = std::min(bfloat16_chunk, e - i);
        for (int64_t j = 0; j < m; ++j) buf[j] = convert<float, From>(px[i + j]);
        float_to_bfloat16(buf, po + i, m);
      }
    });
  });
}

// bfloat16 -> other as bfloat16 -> float32 (exact) -> other, with cast's float rules.
void cast_from_bfloat16(const tensor& x, tensor& out) {
  const bfloat16* px = x.data<bfloat16>();
  if (out.type() == dtype::float32) {
    float* po = out.mutable_data<float>();
    parallel_for(x.num_elements(), cheap_grain,
                 [&](int64_t b, int64_t e) { bfloat16_to_float(px + b, po + b, e - b); });
    return;
  }
  visit_dtype(out.type(), [&](auto tag) {
    using To = decltype(tag);
    To* po = out.mutable_data<To>();
    parallel_for(x.num_elements(), cheap_grain, [&](int64_t b, int64_t e) {
      float buf[bfloat16_chunk];
      for (int64_t i = b; i < e; i += bfloat16_chunk) {
        const int64_t m = std::min(bfloat16_chunk, e - i);
        bfloat16_to_float(px + i, buf, m);
        for (int64_t j = 0; j < m; ++j) po[i + j] = convert<To, float>(buf[j]);
      }
    });
  });
}

void cast_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  const dtype to = ctx.attr<dtype>("dtype");
  if (x.type() == to) {  // immutable tensors: the input itself is the result
    ctx.set_output(0, x);
    return;
  }
  if (to == dtype::bfloat16 || x.type() == dtype::bfloat16) {
    tensor& out = ctx.allocate_output(0, to, x.dims());
    if (to == dtype::bfloat16)
      cast_to_bfloat16(x, out);
    else
      cast_from_bfloat16(x, out);
    return;
  }
  visit_dtype(x.type(), [&](auto from_tag) {
    using From = decltype(from_tag);
    visit_dtype(to, [&](auto to_tag) {
      using To = decltype(to_tag);
      // A lambda, not the function's address: a pointer is called per element
      // (bool to float ran at 1 ns an element), a lambda inlines and vectorizes.
      if constexpr (!std::is_same_v<From, To>)
        unary_map<From, To>(ctx, cheap_grain,
                            scalar_seg<From, To>([](From v) { return convert<To, From>(v); }));
    });
  });
}

std::vector<tensor_spec> infer_cast(const shape_context& c) {
  return {{c.attr<dtype>("dtype"), c.inputs[0].dims}};
}

const auto negate = [](auto x) {
  using T = decltype(x);
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(wrap_t<T>(0) - wrap_t<T>(x));
  else
    return -x;
};

// Gradients (TensorFlow's math_grad.py): written with graph ops, using the
// forward output where that saves work (exp, sqrt, sigmoid, tanh, ...).
void neg_grad(grad_context& c) { c.input_grads = {neg(c.grad())}; }
void abs_grad(grad_context& c) { c.input_grads = {mul(c.grad(), sign(c.input(0)))}; }
void exp_grad(grad_context& c) { c.input_grads = {mul(c.grad(), c.outputs[0])}; }
void log_grad(grad_context& c) { c.input_grads = {div(c.grad(), c.input(0))}; }
void sqrt_grad_fn(grad_context& c) { c.input_grads = {sqrt_grad(c.outputs[0], c.grad())}; }
void rsqrt_grad_fn(grad_context& c) { c.input_grads = {rsqrt_grad(c.outputs[0], c.grad())}; }
void square_grad(grad_context& c) {
  c.input_grads = {mul(c.grad(), mul(c.input(0), scalar_like(c.input(0), 2)))};
}
void sign_grad(grad_context& c) { c.input_grads = {zeros_like(c.input(0))}; }
void reciprocal_grad_fn(grad_context& c) {
  c.input_grads = {reciprocal_grad(c.outputs[0], c.grad())};
}
// relu's output is positive exactly where its input is.
void relu_grad_fn(grad_context& c) { c.input_grads = {relu_grad(c.grad(), c.outputs[0])}; }
void sigmoid_grad_fn(grad_context& c) { c.input_grads = {sigmoid_grad(c.outputs[0], c.grad())}; }
void tanh_grad_fn(grad_context& c) { c.input_grads = {tanh_grad(c.outputs[0], c.grad())}; }
// Between float dtypes the gradient converts back; from integers there is none.
void cast_grad(grad_context& c) {
  if (is_floating(c.input(0).type()) && c.grad().valid() && is_floating(c.grad().type()))
    c.input_grads = {cast(c.grad(), c.input(0).type())};
}

const op_registrar registrations[] = {
    op_registrar({.name = "neg",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::signed_numeric>,
                  .kernel = scalar_kernel<dtypes::signed_numeric>(negate),
                  .summary = "-x",
                  .gradient = neg_grad}),
    op_registrar({.name = "abs",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::signed_numeric>,
                  .kernel = scalar_kernel<dtypes::signed_numeric>([](auto x) {
                    using T = decltype(x);
                    if constexpr (std::is_integral_v<T>)
                      return x < T(0) ? negate(x) : x;
                    else
                      return std::abs(x);
                  }),
                  .summary = "|x|",
                  .gradient = abs_grad}),
    op_registrar({.name = "exp",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::floating>,
                  .kernel = eigen_kernel(exp_seg),
                  .summary = "e^x",
                  .gradient = exp_grad}),
    op_registrar({.name = "log",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::floating>,
                  .kernel = eigen_kernel(log_seg),
                  .summary = "natural logarithm",
                  .gradient = log_grad}),
    op_registrar({.name = "sqrt",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::floating>,
                  // The exact instruction: Eigen's fast float sqrt is x * rsqrt(x),
                  // NaN for +inf, +0 for -0 and 0 for denormals.
                  .kernel = scalar_kernel<dtypes::floating>([](auto x) { return std::sqrt(x); }),
                  .summary = "square root",
                  .gradient = sqrt_grad_fn}),
    op_registrar({.name = "rsqrt",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::floating>,
                  .kernel = eigen_kernel(rsqrt_seg),
                  .summary = "1 / sqrt(x)",
                  .gradient = rsqrt_grad_fn}),
    op_registrar({.name = "square",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::signed_numeric>,
                  .kernel = scalar_kernel<dtypes::signed_numeric>([](auto x) {
                    using T = decltype(x);
                    return static_cast<T>(wrap_t<T>(x) * wrap_t<T>(x));
                  }),
                  .summary = "x * x",
                  .gradient = square_grad}),
    op_registrar({.name = "sign",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::signed_numeric>,
                  .kernel = scalar_kernel<dtypes::signed_numeric>([](auto x) {
                    using T = decltype(x);
                    // -0 gives +0, as in TensorFlow; NaN stays NaN.
                    return x > T(0) ? T(1) : x < T(0) ? T(-1) : x == T(0) ? T(0) : x;
                  }),
                  .summary = "-1, 0 or 1",
                  .gradient = sign_grad}),
    op_registrar({.name = "reciprocal",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::floating>,
                  .kernel = scalar_kernel<dtypes::floating>([](auto x) {
                    using T = decltype(x);
                    return T(1) / x;
                  }),
                  .summary = "1 / x",
                  .gradient = reciprocal_grad_fn}),
    op_registrar({.name = "relu",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::numeric>,
                  .kernel = scalar_kernel<dtypes::numeric>([](auto x) {
                    using T = decltype(x);
                    if constexpr (std::is_unsigned_v<T>)
                      return x;
                    else
                      return x < T(0) ? T(0) : x;  // NaN passes through
                  }),
                  .summary = "max(x, 0)",
                  .gradient = relu_grad_fn}),
    op_registrar({.name = "sigmoid",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::floating>,
                  .kernel = eigen_kernel(sigmoid_seg),
                  .summary = "1 / (1 + e^-x)",
                  .gradient = sigmoid_grad_fn}),
    op_registrar({.name = "tanh",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::floating>,
                  .kernel = eigen_kernel(tanh_seg),
                  .summary = "hyperbolic tangent",
                  .gradient = tanh_grad_fn}),
    op_registrar({.name = "logical_not",
                  .num_inputs = 1,
                  .infer = infer_unary<dtypes::boolean>,
                  .kernel = scalar_kernel<dtypes::boolean>([](bool x) { return !x; }),
                  .summary = "!x",
                  .not_differentiable = true}),
    op_registrar({.name = "cast",
                  .num_inputs = 1,
                  .infer = infer_cast,
                  .kernel = cast_kernel,
                  .summary = "converts to the dtype attribute",
                  .gradient = cast_grad}),
};

// The float32 functions fused_elementwise runs (ops/elementwise.hpp): the
// segments the kernels above run, and for the plain ones the same loop.
const float_unary_registrar fusable[] = {
    {"exp", exp_seg(float{})},
    {"log", log_seg(float{})},
    {"sigmoid", sigmoid_seg(float{})},
    {"tanh", tanh_seg(float{})},
    {"rsqrt", rsqrt_seg(float{})},
    {"neg", scalar_seg<float>([](float x) { return -x; })},
    {"square", scalar_seg<float>([](float x) { return x * x; })},
    {"sqrt", scalar_seg<float>([](float x) { return std::sqrt(x); })},
    {"abs", scalar_seg<float>([](float x) { return std::abs(x); })},
    {"relu", scalar_seg<float>([](float x) { return x < 0.0f ? 0.0f : x; })},
};

}  // namespace

output neg(output x, const std::string& name) { return make_op("neg", {x}, {}, name); }
output abs(output x, const std::string& name) { return make_op("abs", {x}, {}, name); }
output exp(output x, const std::string& name) { return make_op("exp", {x}, {}, name); }
output log(output x, const std::string& name) { return make_op("log", {x}, {}, name); }
output sqrt(output x, const std::string& name) { return make_op("sqrt", {x}, {}, name); }
output rsqrt(output x, const std::string& name) { return make_op("rsqrt", {x}, {}, name); }
output square(output x, const std::string& name) { return make_op("square", {x}, {}, name); }
output sign(output x, const std::string& name) { return make_op("sign", {x}, {}, name); }
output reciprocal(output x, const std::string& name) {
  return make_op("reciprocal", {x}, {}, name);
}
output relu(output x, const std::string& name) { return make_op("relu", {x}, {}, name); }
output sigmoid(output x, const std::string& name) { return make_op("sigmoid", {x}, {}, name); }
output tanh(output x, const std::string& name) { return make_op("tanh", {x}, {}, name); }
output logical_not(output x, const std::string& name) {
  return make_op("logical_not", {x}, {}, name);
}

output cast(output x, dtype to, const std::string& name) {
  return make_op("cast", {x}, {{"dtype", to}}, name);
}

output scalar_like(output x, double value, const std::string& name) {
  tensor t;
  if (x.type() == dtype::bfloat16)  // through float32, as cast converts
    t = tensor::scalar<bfloat16>(to_bfloat16(static_cast<float>(value)));
  else
    visit_dtype(x.type(), [&](auto tag) {
      using T = decltype(tag);
      t = tensor::scalar<T>(convert<T, double>(value));
    });
  return constant(x.owner(), std::move(t), name);
}

}  // namespace actorflow
