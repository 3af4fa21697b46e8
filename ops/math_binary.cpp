// Binary element-wise math with NumPy broadcasting: arithmetic, comparisons,
// logical and/or, select; and the operators on `output`.
#include <cmath>

#include "ops/bfloat16_widen.hpp"
#include "ops/math.hpp"
#include "ops/math_detail.hpp"
#include "ops/op_util.hpp"
#include "ops/reduce.hpp"

namespace actorflow {

namespace {

using namespace math_detail;

template <dtypes Set, bool BoolOut>
std::vector<tensor_spec> infer_binary(const shape_context& c) {
  auto& a = c.inputs[0];
  auto& b = c.inputs[1];
  check_same_dtype(c.op, a.type, b.type);
  check_dtype(c.op, Set, a.type);
  return {{BoolOut ? dtype::boolean : a.type, broadcast_partial({a.dims, b.dims}, c.op)}};
}

// f is generic over the element type and simple enough for the loops to vectorize.
template <dtypes Set, bool BoolOut, class F>
kernel_fn elementwise_kernel(F f) {
  return [f](kernel_context& ctx) {
    visit_set<Set>(ctx.input(0).type(), ctx.op, [&](auto tag) {
      using T = decltype(tag);
      using R = std::conditional_t<BoolOut, bool, T>;
      binary_elementwise<T, R>(ctx, cheap_grain, f);
    });
  };
}

// Integers wrap (two's complement) rather than overflow into undefined behaviour.
template <class Op>
auto wrapping(Op op) {
  return [op](auto x, auto y) {
    using T = decltype(x);
    return static_cast<T>(op(static_cast<wrap_t<T>>(x), static_cast<wrap_t<T>>(y)));
  };
}

void div_kernel(kernel_context& ctx) {
  visit_set<dtypes::numeric>(ctx.input(0).type(), ctx.op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      const tensor& b = ctx.input(1);
      // A zero divisor only matters when some division happens (a non-empty a
      // means a non-empty output, or the shape check has already thrown).
      if (ctx.input(0).num_elements() > 0 && b.type() == dtype_of<T>() &&
          (b.flat<T>() == T(0)).any())
        ctx.fail("integer division by zero");
      binary_elementwise<T, T>(ctx, costly_grain, [](T x, T y) {
        // min / -1 overflows (and traps on x86): negate with wrap-around instead.
        if constexpr (std::is_signed_v<T>)
          if (y == T(-1)) return static_cast<T>(wrap_t<T>(0) - static_cast<wrap_t<T>>(x));
        return static_cast<T>(x / y);  // truncates toward zero, as in C++
      });
    } else {
      binary_elementwise<T, T>(ctx, cheap_grain, [](T x, T y) { return x / y; });
    }
  });
}

template <class T>
T int_pow(T base, T exponent) {
  using U = wrap_t<T>;
  U b = static_cast<U>(base), r = 1;
  for (T e = exponent; e > 0; e /= 2) {
    if (e % 2) r = static_cast<U>(r * b);
    b = static_cast<U>(b * b);
  }
  return static_cast<T>(r);
}

void pow_kernel(kernel_context& ctx) {
  visit_set<dtypes::numeric>(ctx.input(0).type(), ctx.op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        const tensor& b = ctx.input(1);
        if (ctx.input(0).num_elements() > 0 && b.type() == dtype_of<T>() &&
            (b.flat<T>() < T(0)).any())
          ctx.fail("integers to negative integer powers are not allowed");
      }
      binary_elementwise<T, T>(ctx, costly_grain, [](T x, T y) { return int_pow(x, y); });
    } else {
      // std::pow per element: Eigen's vectorized pow measured slower here (its
      // accurate generic_pow). Squaring, the common case, is a plain product.
      binary_broadcast<T, T>(
          ctx, costly_grain, [](T* o, const T* a, bool va, const T* b, bool vb, int64_t n) {
            if (!vb && *b == T(2))
              binary_run(o, a, va, b, vb, n, [](T x, T) { return x * x; });
            else
              binary_run(o, a, va, b, vb, n, [](T x, T y) { return std::pow(x, y); });
          });
    }
  });
}

std::vector<tensor_spec> infer_select(const shape_context& c) {
  auto& cond = c.inputs[0];
  auto& a = c.inputs[1];
  auto& b = c.inputs[2];
  if (cond.type != dtype::boolean)
    c.fail(std::string("condition must be bool, got ") + dtype_name(cond.type));
  check_same_dtype(c.op, a.type, b.type);
  if (a.type == dtype::bfloat16) fail_no_bfloat16_kernel(c.op);
  return {{a.type, broadcast_partial({cond.dims, a.dims, b.dims}, c.op)}};
}

void select_kernel(kernel_context& ctx) {
  const tensor& cond = ctx.input(0);
  const tensor& a = ctx.input(1);
  const tensor& b = ctx.input(2);
  if (cond.type() != dtype::boolean)
    ctx.fail(std::string("condition must be bool, got ") + dtype_name(cond.type()));
  check_same_dtype(ctx.op, a.type(), b.type());
  auto plan = make_plan<3>({&cond.dims(), &a.dims(), &b.dims()}, ctx.op);
  visit_dtype(a.type(), [&](auto tag) {
    using T = decltype(tag);
    tensor& out = ctx.allocate_output(0, a.type(), plan.out);
    if (plan.num_elements == 0) return;
    const bool* pc = cond.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.mutable_data<T>();
    const int64_t sc = plan.strides[0].back(), sa = plan.strides[1].back(),
                  sb = plan.strides[2].back();
    for_each_run(plan, cheap_grain, [&](int64_t o, const std::array<int64_t, 3>& off, int64_t n) {
      const bool* __restrict c = pc + off[0];
      const T* __restrict x = pa + off[1];
      const T* __restrict y = pb + off[2];
      T* __restrict dst = po + o;
      if (sc && sa && sb) {
        for (int64_t i = 0; i < n; ++i) dst[i] = c[i] ? x[i] : y[i];
      } else if (!sc) {  // one condition for the whole run: a copy or a fill
        const T* src = *c ? x : y;
        if (*c ? sa : sb)
          std::copy(src, src + n, dst);
        else
          std::fill(dst, dst + n, *src);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = c[i] ? x[i * sa] : y[i * sb];
      }
    });
  });
}

const auto maximum_fn = [](auto x, auto y) {
  if constexpr (std::is_floating_point_v<decltype(x)>)
    return (x > y || std::isnan(x)) ? x : y;
  else
    return x > y ? x : y;
};
const auto minimum_fn = [](auto x, auto y) {
  if constexpr (std::is_floating_point_v<decltype(x)>)
    return (x < y || std::isnan(x)) ? x : y;
  else
    return x < y ? x : y;
};

// Gradients of broadcasting ops: each input's gradient is summed back down to
// that input's shape (read at run time, so -1 batch dims work).
void add_grad(grad_context& c) {
  c.input_grads = {sum_to_shape_of(c.grad(), c.input(0)), sum_to_shape_of(c.grad(), c.input(1))};
}
void sub_grad(grad_context& c) {
  c.input_grads = {sum_to_shape_of(c.grad(), c.input(0)),
                   sum_to_shape_of(neg(c.grad()), c.input(1))};
}
void mul_grad(grad_context& c) {
  c.input_grads = {sum_to_shape_of(mul(c.grad(), c.input(1)), c.input(0)),
                   sum_to_shape_of(mul(c.grad(), c.input(0)), c.input(1))};
}

void div_grad(grad_context& c) {
  auto a = c.input(0), b = c.input(1), dy = c.grad();
  c.input_grads = {sum_to_shape_of(div(dy, b), a),
                   sum_to_shape_of(mul(dy, div(div(neg(a), b), b)), b)};
}
// The chosen input takes the gradient; on ties the first one (as TensorFlow).
void route_grad(grad_context& c, output first_chosen) {
  auto dy = c.grad();
  auto zero = scalar_like(dy, 0);
  c.input_grads = {sum_to_shape_of(select(first_chosen, dy, zero), c.input(0)),
                   sum_to_shape_of(select(first_chosen, zero, dy), c.input(1))};
}
void maximum_grad(grad_context& c) { route_grad(c, greater_equal(c.input(0), c.input(1))); }
void minimum_grad(grad_context& c) { route_grad(c, less_equal(c.input(0), c.input(1))); }
// d/db a^b = a^b log(a), taken as 0 where a <= 0 (as TensorFlow, which has no
// real value to give there), with log never seeing a value <= 0.
void pow_grad(grad_context& c) {
  auto a = c.input(0), b = c.input(1), y = c.outputs[0], dy = c.grad();
  auto da = mul(mul(dy, b), pow(a, sub(b, scalar_like(b, 1))));
  auto positive = greater(a, scalar_like(a, 0));
  auto log_a = log(select(positive, a, scalar_like(a, 1)));
  auto db = select(positive, mul(mul(dy, y), log_a), scalar_like(a, 0));
  c.input_grads = {sum_to_shape_of(da, a), sum_to_shape_of(db, b)};
}
void select_grad(grad_context& c) {
  auto cond = c.input(0), dy = c.grad();
  auto zero = scalar_like(dy, 0);
  c.input_grads = {output(), sum_to_shape_of(select(cond, dy, zero), c.input(1)),
                   sum_to_shape_of(select(cond, zero, dy), c.input(2))};
}

// add takes bfloat16 too, through float32 (ops/bfloat16_widen.hpp): the
// gradient driver sums with it the gradients of a bfloat16 value that several
// ops read (a weight cast once and used by two matmuls).
std::vector<tensor_spec> infer_add(const shape_context& c) {
  auto& a = c.inputs[0];
  auto& b = c.inputs[1];
  if (a.type == dtype::bfloat16 && b.type == dtype::bfloat16)
    return {{a.type, broadcast_partial({a.dims, b.dims}, c.op)}};
  return infer_binary<dtypes::numeric, false>(c);
}

kernel_fn add_kernel() {
  auto numeric =
      elementwise_kernel<dtypes::numeric, false>(wrapping([](auto x, auto y) { return x + y; }));
  return [numeric](kernel_context& ctx) {
    if (ctx.input(0).type() == dtype::bfloat16 && ctx.input(1).type() == dtype::bfloat16)
      return run_widened_to_float32(ctx, numeric);
    numeric(ctx);
  };
}

const op_registrar registrations[] = {
    op_registrar({.name = "add",
                  .num_inputs = 2,
                  .infer = infer_add,
                  .kernel = add_kernel(),
                  .summary = "a + b, broadcasting",
                  .gradient = add_grad}),
    op_registrar({.name = "sub",
                  .num_inputs = 2,
                  .infer = infer_binary<dtypes::numeric, false>,
                  .kernel = elementwise_kernel<dtypes::numeric, false>(
                      wrapping([](auto x, auto y) { return x - y; })),
                  .summary = "a - b, broadcasting",
                  .gradient = sub_grad}),
    op_registrar({.name = "mul",
                  .num_inputs = 2,
                  .infer = infer_binary<dtypes::numeric, false>,
                  .kernel = elementwise_kernel<dtypes::numeric, false>(
                      wrapping([](auto x, auto y) { return x * y; })),
                  .summary = "a * b, broadcasting",
                  .gradient = mul_grad}),
    op_registrar({.name = "div",
                  .num_inputs = 2,
                  .infer = infer_binary<dtypes::numeric, false>,
                  .kernel = div_kernel,
                  .summary = "a / b, broadcasting; integers truncate",
                  .gradient = div_grad}),
    op_registrar({.name = "maximum",
                  .num_inputs = 2,
                  .infer = infer_binary<dtypes::numeric, false>,
                  .kernel = elementwise_kernel<dtypes::numeric, false>(maximum_fn),
                  .summary = "element-wise maximum, broadcasting",
                  .gradient = maximum_grad}),
    op_registrar({.name = "minimum",
                  .num_inputs = 2,
                  .infer = infer_binary<dtypes::numeric, false>,
                  .kernel = elementwise_kernel<dtypes::numeric, false>(minimum_fn),
                  .summary = "element-wise minimum, broadcasting",
                  .gradient = minimum_grad}),
    op_registrar({.name = "pow",
                  .num_inputs = 2,
                  .infer = infer_binary<dtypes::numeric, false>,
                  .kernel = pow_kernel,
                  .summary = "a ^ b, broadcasting",
                  .gradient = pow_grad}),
    op_registrar(
        {.name = "equal",
         .num_inputs = 2,
         .infer = infer_binary<dtypes::all, true>,
         .kernel = elementwise_kernel<dtypes::all, true>([](auto x, auto y) { return x == y; }),
         .summary = "a == b, broadcasting",
         .not_differentiable = true}),
    op_registrar(
        {.name = "not_equal",
         .num_inputs = 2,
         .infer = infer_binary<dtypes::all, true>,
         .kernel = elementwise_kernel<dtypes::all, true>([](auto x, auto y) { return x != y; }),
         .summary = "a != b, broadcasting",
         .not_differentiable = true}),
    op_registrar(
        {.name = "less",
         .num_inputs = 2,
         .infer = infer_binary<dtypes::numeric, true>,
         .kernel = elementwise_kernel<dtypes::numeric, true>([](auto x, auto y) { return x < y; }),
         .summary = "a < b, broadcasting",
         .not_differentiable = true}),
    op_registrar(
        {.name = "less_equal",
         .num_inputs = 2,
         .infer = infer_binary<dtypes::numeric, true>,
         .kernel = elementwise_kernel<dtypes::numeric, true>([](auto x, auto y) { return x <= y; }),
         .summary = "a <= b, broadcasting",
         .not_differentiable = true}),
    op_registrar(
        {.name = "greater",
         .num_inputs = 2,
         .infer = infer_binary<dtypes::numeric, true>,
         .kernel = elementwise_kernel<dtypes::numeric, true>([](auto x, auto y) { return x > y; }),
         .summary = "a > b, broadcasting",
         .not_differentiable = true}),
    op_registrar(
        {.name = "greater_equal",
         .num_inputs = 2,
         .infer = infer_binary<dtypes::numeric, true>,
         .kernel = elementwise_kernel<dtypes::numeric, true>([](auto x, auto y) { return x >= y; }),
         .summary = "a >= b, broadcasting",
         .not_differentiable = true}),
    op_registrar(
        {.name = "logical_and",
         .num_inputs = 2,
         .infer = infer_binary<dtypes::boolean, true>,
         .kernel = elementwise_kernel<dtypes::boolean, true>([](bool x, bool y) { return x && y; }),
         .summary = "a && b, broadcasting",
         .not_differentiable = true}),
    op_registrar(
        {.name = "logical_or",
         .num_inputs = 2,
         .infer = infer_binary<dtypes::boolean, true>,
         .kernel = elementwise_kernel<dtypes::boolean, true>([](bool x, bool y) { return x || y; }),
         .summary = "a || b, broadcasting",
         .not_differentiable = true}),
    op_registrar({.name = "select",
                  .num_inputs = 3,
                  .infer = infer_select,
                  .kernel = select_kernel,
                  .summary = "cond ? a : b element-wise, broadcasting (NumPy where)",
                  .gradient = select_grad}),
};

}  // namespace

output add(output a, output b, const std::string& name) { return make_op("add", {a, b}, {}, name); }
output sub(output a, output b, const std::string& name) { return make_op("sub", {a, b}, {}, name); }
output mul(output a, output b, const std::string& name) { return make_op("mul", {a, b}, {}, name); }
output div(output a, output b, const std::string& name) { return make_op("div", {a, b}, {}, name); }
output maximum(output a, output b, const std::string& name) {
  return make_op("maximum", {a, b}, {}, name);
}
output minimum(output a, output b, const std::string& name) {
  return make_op("minimum", {a, b}, {}, name);
}
output pow(output a, output b, const std::string& name) { return make_op("pow", {a, b}, {}, name); }

output equal(output a, output b, const std::string& name) {
  return make_op("equal", {a, b}, {}, name);
}
output not_equal(output a, output b, const std::string& name) {
  return make_op("not_equal", {a, b}, {}, name);
}
output less(output a, output b, const std::string& name) {
  return make_op("less", {a, b}, {}, name);
}
output less_equal(output a, output b, const std::string& name) {
  return make_op("less_equal", {a, b}, {}, name);
}
output greater(output a, output b, const std::string& name) {
  return make_op("greater", {a, b}, {}, name);
}
output greater_equal(output a, output b, const std::string& name) {
  return make_op("greater_equal", {a, b}, {}, name);
}
output logical_and(output a, output b, const std::string& name) {
  return make_op("logical_and", {a, b}, {}, name);
}
output logical_or(output a, output b, const std::string& name) {
  return make_op("logical_or", {a, b}, {}, name);
}
output select(output cond, output a, output b, const std::string& name) {
  return make_op("select", {cond, a, b}, {}, name);
}

output operator+(output a, output b) { return add(a, b); }
output operator-(output a, output b) { return sub(a, b); }
output operator*(output a, output b) { return mul(a, b); }
output operator/(output a, output b) { return div(a, b); }
output operator-(output x) { return neg(x); }
output operator+(output a, double b) { return add(a, scalar_like(a, b)); }
output operator-(output a, double b) { return sub(a, scalar_like(a, b)); }
output operator*(output a, double b) { return mul(a, scalar_like(a, b)); }
output operator/(output a, double b) { return div(a, scalar_like(a, b)); }
output operator+(double a, output b) { return add(scalar_like(b, a), b); }
output operator-(double a, output b) { return sub(scalar_like(b, a), b); }
output operator*(double a, output b) { return mul(scalar_like(b, a), b); }
output operator/(double a, output b) { return div(scalar_like(b, a), b); }

}  // namespace actorflow
