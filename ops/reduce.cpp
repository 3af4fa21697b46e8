// Reductions. Every reduction is brought to one form: a dense (O, R, I) block
// reduced over R. Size-1 dims are dropped and neighbouring dims merged, so
// reducing the last axes gives (O, R, 1): contiguous rows reduced with Eigen's
// vectorized redux; leading or middle axes give (O, R, I): whole rows combined
// element-wise into an accumulator row, which vectorizes too. Other patterns
// (reduced dims not adjacent) are transposed first. Large reductions split R
// into blocks fixed by the shape alone, so results do not depend on threads.
#include "ops/reduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/array.hpp"
#include "ops/array_util.hpp"
#include "ops/bfloat16_widen.hpp"
#include "ops/geometry/reduce_plan.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

using detail::list_to_string;

enum class reduce_kind { sum, mean, max, min, prod };

// Elements per partial result: fixes the summation order of long reductions.
constexpr int64_t block = int64_t{1} << 15;

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

template <class T>
using row_map = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class T>
struct sum_op {
  static T combine(T a, T b) { return static_cast<T>(a + b); }
  static T redux(const row_map<T>& m) { return m.sum(); }
};

template <class T>
struct prod_op {
  static T combine(T a, T b) { return static_cast<T>(a * b); }
  static T redux(const row_map<T>& m) { return m.prod(); }
};

// NaN wins: once either side is NaN the result is NaN.
template <class T>
struct max_op {
  static T combine(T a, T b) { return (b > a || is_nan(b)) ? b : a; }
  static T redux(const row_map<T>& m) {
    if constexpr (std::is_floating_point_v<T>)
      return m.template maxCoeff<Eigen::PropagateNaN>();
    else
      return m.maxCoeff();
  }
};

template <class T>
struct min_op {
  static T combine(T a, T b) { return (b < a || is_nan(b)) ? b : a; }
  static T redux(const row_map<T>& m) {
    if constexpr (std::is_floating_point_v<T>)
      return m.template minCoeff<Eigen::PropagateNaN>();
    else
      return m.minCoeff();
  }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// (O, R, 1): out[o] = reduce(x[o, :]).
template <class T, class Op>
void reduce_rows(const T* x, T* out, int64_t O, int64_t R) {
  int64_t nb = 1;
  if (O < 8 && R > 2 * block) nb = std::min<int64_t>(64, ceil_div(R, block));
  if (nb == 1) {
    parallel_for(O, std::max<int64_t>(1, parallel_grain / R), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) out[o] = Op::redux(row_map<T>(x + o * R, R));
    });
    return;
  }
  int64_t chunk = ceil_div(R, nb);
  nb = ceil_div(R, chunk);  // every block non-empty
  std::vector<T> partial(static_cast<size_t>(O * nb));
  parallel_for(O * nb, 1, [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      int64_t o = u / nb, r0 = (u % nb) * chunk, r1 = std::min(R, r0 + chunk);
      partial[static_cast<size_t>(u)] = Op::redux(row_map<T>(x + o * R + r0, r1 - r0));
    }
  });
  for (int64_t o = 0; o < O; ++o) {
    T acc = partial[static_cast<size_t>(o * nb)];
    for (int64_t k = 1; k < nb; ++k)
      acc = Op::combine(acc, partial[static_cast<size_t>(o * nb + k)]);
    out[o] = acc;
  }
}

// (O, R, I) with I > 1: out[o, :] = reduce over r of x[o, r, :], row by row.
template <class T, class Op>
void reduce_cols(const T* x, T* out, int64_t O, int64_t R, int64_t I) {
  constexpr int64_t max_cols = 2048;  // an accumulator slice that stays in L1
  int64_t cw = std::min(I, max_cols), nbc = ceil_div(I, cw);
  int64_t nbr = 1;
  if (O * nbc < 8 && R * cw > 2 * block) nbr = std::min<int64_t>(64, ceil_div(R * cw, block));
  int64_t rchunk = ceil_div(R, nbr);
  nbr = ceil_div(R, rchunk);
  std::vector<T> partial(nbr > 1 ? static_cast<size_t>(O * nbr * I) : 0);
  T* acc_base = nbr > 1 ? partial.data() : out;
  int64_t grain = std::max<int64_t>(1, parallel_grain / (rchunk * cw));
  parallel_for(O * nbr * nbc, grain, [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      int64_t kc = u % nbc, rest = u / nbc;
      int64_t kr = rest % nbr, o = rest / nbr;
      int64_t c0 = kc * cw, n = std::min(I, c0 + cw) - c0;
      int64_t r0 = kr * rchunk, r1 = std::min(R, r0 + rchunk);
      T* acc = acc_base + (o * nbr + kr) * I + c0;
      const T* row = x + (o * R + r0) * I + c0;
      std::copy_n(row, n, acc);
      int64_t r = r0 + 1;
      // Four rows per pass: a quarter of the accumulator loads and stores.
      for (; r + 4 <= r1; r += 4) {
        const T* a = row + I;
        const T* b = a + I;
        const T* d = b + I;
        const T* f = d + I;
        for (int64_t c = 0; c < n; ++c)
          acc[c] =
              Op::combine(acc[c], Op::combine(Op::combine(a[c], b[c]), Op::combine(d[c], f[c])));
        row = f;
      }
      for (; r < r1; ++r) {
        row += I;
        for (int64_t c = 0; c < n; ++c) acc[c] = Op::combine(acc[c], row[c]);
      }
    }
  });
  if (nbr == 1) return;
  for (int64_t o = 0; o < O; ++o) {
    T* dst = out + o * I;
    const T* p = partial.data() + o * nbr * I;
    std::copy_n(p, I, dst);
    for (int64_t k = 1; k < nbr; ++k)
      for (int64_t c = 0; c < I; ++c) dst[c] = Op::combine(dst[c], p[k * I + c]);
  }
}

template <class T, class Op>
void reduce_block(const T* x, T* out, int64_t O, int64_t R, int64_t I) {
  if (I == 1)
    reduce_rows<T, Op>(x, out, O, R);
  else
    reduce_cols<T, Op>(x, out, O, R, I);
}

shape reduced_shape(const shape& in, const std::vector<bool>& red, bool keep_dims) {
  std::vector<int64_t> out;
  for (int k = 0; k < in.rank(); ++k) {
    if (!red[static_cast<size_t>(k)])
      out.push_back(in[k]);
    else if (keep_dims)
      out.push_back(1);
  }
  return shape(out);
}

const char* kind_name(reduce_kind k) {
  switch (k) {
    case reduce_kind::sum:
      return "sum";
    case reduce_kind::mean:
      return "mean";
    case reduce_kind::max:
      return "max";
    case reduce_kind::min:
      return "min";
    case reduce_kind::prod:
      return "prod";
  }
  return "?";
}

template <class T>
void run_kind(reduce_kind kind, const T* x, T* out, int64_t O, int64_t R, int64_t I) {
  switch (kind) {
    case reduce_kind::sum:
    case reduce_kind::mean:
      reduce_block<T, sum_op<T>>(x, out, O, R, I);
      break;
    case reduce_kind::prod:
      reduce_block<T, prod_op<T>>(x, out, O, R, I);
      break;
    case reduce_kind::max:
      reduce_block<T, max_op<T>>(x, out, O, R, I);
      break;
    case reduce_kind::min:
      reduce_block<T, min_op<T>>(x, out, O, R, I);
      break;
  }
  if (kind == reduce_kind::mean) {
    int64_t n = O * I;
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if constexpr (std::is_floating_point_v<T>)
          out[i] /= static_cast<T>(R);
        else
          out[i] = static_cast<T>(static_cast<int64_t>(out[i]) / R);
      }
    });
  }
}

// Reduces x over the `red` dims into `out_dims` (holding the kept dims in order,
// possibly with extra 1s). Sets output 0 of ctx.
void reduce_tensor(kernel_context& ctx, reduce_kind kind, const tensor& x,
                   const std::vector<bool>& red, const shape& out_dims) {
  auto p = plan_reduction(x.dims().dims(), red);
  if (p.reduced_count == 0 && p.kept_count > 0) {
    std::string what = "input " + x.dims().to_string() + " reduced over a zero-size dim";
    if (kind == reduce_kind::max || kind == reduce_kind::min)
      ctx.fail(std::string("cannot take the ") + kind_name(kind) + " of no elements: " + what);
    if (kind == reduce_kind::mean && !is_floating(x.type()))
      ctx.fail("integer mean of no elements: " + what);
    tensor& out = ctx.allocate_output(0, x.type(), out_dims);
    double v = kind == reduce_kind::prod ? 1 : kind == reduce_kind::sum ? 0 : std::nan("");
    return detail::fill_value(out, v, ctx.op);
  }
  if (!p.reduces || x.num_elements() == 0) {
    // Nothing to combine (only size-1 dims reduced, or no output elements).
    if (x.num_elements() == out_dims.num_elements()) return ctx.set_output(0, x.reshaped(out_dims));
    ctx.allocate_output(0, x.type(), out_dims);
    return;
  }
  tensor src = x;
  if (!p.copy_dims.empty()) {
    src = tensor(x.type(), shape{x.num_elements()});
    detail::strided_copy(dtype_size(x.type()), x.raw_data(), p.copy_strides, src.raw_mutable_data(),
                         detail::dense_strides(p.copy_dims), p.copy_dims);
  }
  const int64_t O = p.outer, R = p.reduced, I = p.inner;
  tensor& out = ctx.allocate_output(0, x.type(), out_dims);
  visit_numeric(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>)  // visit_numeric rejects bool at run time
      run_kind<T>(kind, src.data<T>(), out.mutable_data<T>(), O, R, I);
  });
}

void check_numeric(dtype t, const std::string& op, const shape& dims) {
  if (t == dtype::boolean)
    fail(op, "expects a numeric tensor, got " + tensor_spec{t, dims}.to_string());
}

std::vector<tensor_spec> reduce_infer(const shape_context& c) {
  auto& in = c.inputs[0];
  check_numeric(in.type, c.op, in.dims);
  auto red = reduced_dims(in.dims, c.attr_or<std::vector<int64_t>>("axes", {}), c.op);
  return {{in.type, reduced_shape(in.dims, red, c.attr_or<bool>("keep_dims", false))}};
}

kernel_fn reduce_kernel(reduce_kind kind) {
  return [kind](kernel_context& ctx) {
    const tensor& x = ctx.input(0);
    check_numeric(x.type(), ctx.op, x.dims());
    auto red = reduced_dims(x.dims(), ctx.attr_or<std::vector<int64_t>>("axes", {}), ctx.op);
    reduce_tensor(ctx, kind, x, red,
                  reduced_shape(x.dims(), red, ctx.attr_or<bool>("keep_dims", false)));
  };
}

// ---- argmax / argmin -------------------------------------------------------

// v replaces best when it is larger (smaller), or the first NaN.
template <class T, bool is_max>
bool better(T v, T best) {
  if constexpr (is_max)
    return v > best || (is_nan(v) && !is_nan(best));
  else
    return v < best || (is_nan(v) && !is_nan(best));
}

template <class T, bool is_max>
void arg_reduce(const T* x, int64_t* out, int64_t O, int64_t R, int64_t I) {
  if (I == 1) {
    parallel_for(O, std::max<int64_t>(1, parallel_grain / R), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = x + o * R;
        T best = row[0];
        int64_t at = 0;
        for (int64_t r = 1; r < R; ++r)
          if (better<T, is_max>(row[r], best)) best = row[r], at = r;
        out[o] = at;
      }
    });
    return;
  }
  constexpr int64_t cw = 256;
  int64_t nbc = ceil_div(I, cw);
  parallel_for(O * nbc, std::max<int64_t>(1, parallel_grain / (R * cw)), [&](int64_t b, int64_t e) {
    std::vector<T> best(static_cast<size_t>(cw));
    for (int64_t u = b; u < e; ++u) {
      int64_t o = u / nbc, c0 = (u % nbc) * cw, n = std::min(I, c0 + cw) - c0;
      const T* row = x + o * R * I + c0;
      int64_t* at = out + o * I + c0;
      std::copy_n(row, n, best.data());
      std::fill_n(at, n, 0);
      for (int64_t r = 1; r < R; ++r) {
        row += I;
        for (int64_t c = 0; c < n; ++c)
          if (better<T, is_max>(row[c], best[c])) best[c] = row[c], at[c] = r;
      }
    }
  });
}

std::vector<tensor_spec> arg_infer(const shape_context& c) {
  auto& in = c.inputs[0];
  check_numeric(in.type, c.op, in.dims);
  int axis = normalize_axis(c.attr_or<int64_t>("axis", 0), in.dims.rank(), c.op);
  auto d = in.dims.dims();
  d.erase(d.begin() + axis);
  return {{dtype::int64, shape(d)}};
}

template <bool is_max>
void arg_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  check_numeric(x.type(), ctx.op, x.dims());
  int axis = normalize_axis(ctx.attr_or<int64_t>("axis", 0), x.rank(), ctx.op);
  auto d = x.dims().dims();
  int64_t O = 1, R = d[static_cast<size_t>(axis)], I = 1;
  for (int k = 0; k < axis; ++k) O *= d[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < d.size(); ++k) I *= d[k];
  d.erase(d.begin() + axis);
  tensor& out = ctx.allocate_output(0, dtype::int64, shape(d));
  if (out.num_elements() == 0) return;
  if (R == 0)
    ctx.fail("cannot take the " + ctx.op + " of no elements: axis " + std::to_string(axis) +
             " of " + x.dims().to_string() + " has size 0");
  visit_numeric(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>)
      arg_reduce<T, is_max>(x.data<T>(), out.mutable_data<int64_t>(), O, R, I);
  });
}

// ---- sum_to_shape_of -------------------------------------------------------

// The dims of `from` that summing to `to` removes or shrinks to 1 (the reverse of
// broadcasting `to` to `from`). Unknown dims pass at build time.
std::vector<bool> sum_to_dims(const shape& from, const shape& to, const std::string& op) {
  bool ok = to.rank() <= from.rank();
  int lead = from.rank() - to.rank();
  std::vector<bool> red(static_cast<size_t>(from.rank()), true);
  for (int k = 0; ok && k < to.rank(); ++k) {
    int64_t f = from[lead + k], t = to[k];
    ok = f < 0 || t < 0 || t == 1 || f == t;
    red[static_cast<size_t>(lead + k)] = t == 1 && f != 1;
  }
  if (!ok)
    fail(op, "cannot sum " + from.to_string() + " to " + to.to_string() + ": " + to.to_string() +
                 " does not broadcast to " + from.to_string());
  return red;
}

std::vector<tensor_spec> sum_to_infer(const shape_context& c) {
  auto& x = c.inputs[0];
  check_numeric(x.type, c.op, x.dims);
  sum_to_dims(x.dims, c.inputs[1].dims, c.op);
  return {{x.type, c.inputs[1].dims}};
}

void sum_to_kernel(kernel_context& ctx) {
  // bfloat16 (matmul's gradient over broadcast batch dims) sums in float32;
  // input 1 gives only its shape.
  if (ctx.input(0).type() == dtype::bfloat16) return run_widened_to_float32(ctx, sum_to_kernel, 1);
  const tensor& x = ctx.input(0);
  check_numeric(x.type(), ctx.op, x.dims());
  const shape& to = ctx.input(1).dims();
  auto red = sum_to_dims(x.dims(), to, ctx.op);
  reduce_tensor(ctx, reduce_kind::sum, x, red, to);
}

// ---- l2_loss ------------------------------------------------------------------

std::vector<tensor_spec> l2_loss_infer(const shape_context& c) {
  auto& x = c.inputs[0];
  if (x.type != dtype::float32 && x.type != dtype::float64)
    c.fail("expects a float tensor, got " + x.to_string());
  return {{x.type, shape{}}};
}

// Each square is halved before the sum, as TensorFlow's L2Loss does: a sum
// of squares that would pass the float's range halved stays in it.
template <class T>
struct sum_half_squares_op {
  static T combine(T a, T b) { return a + b; }
  static T redux(const row_map<T>& m) { return (m.square() * T(0.5)).sum(); }
};

// One row of all the elements, reduced as a sum's: in blocks fixed by the
// size, so the result does not depend on the threads.
void l2_loss_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  visit_floating(x.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    T total = 0;
    if (x.num_elements() > 0)
      reduce_rows<T, sum_half_squares_op<T>>(x.data<T>(), &total, 1, x.num_elements());
    ctx.allocate_output(0, x.type(), shape{}).template mutable_data<T>()[0] = total;
  });
}

// ---- l2_loss_rows -------------------------------------------------------------
// The l2_loss of the tensor that scatter-adding `rows` at `indices` makes (a
// gathered gradient, scatter_add_like's) without making it: repeated indices
// are summed first, as the scatter sums them, so that global-norm clipping
// takes the true gradient's norm at the batch's cost, not the table's. Which
// rows the indices name does not change the norm, so they are not range-checked.

std::vector<tensor_spec> l2_loss_rows_infer(const shape_context& c) {
  auto& rows = c.inputs[0];
  auto& indices = c.inputs[1];
  if (rows.type != dtype::float32 && rows.type != dtype::float64)
    c.fail("expects float rows, got " + rows.to_string());
  detail::check_index_type(indices.type, c.op);
  bool fits = rows.dims.rank() >= indices.dims.rank();
  for (int k = 0; fits && k < indices.dims.rank(); ++k)
    fits = shape{rows.dims[k]}.compatible_with(shape{indices.dims[k]});
  if (!fits)
    c.fail("rows " + rows.to_string() + " do not start with the dims of indices " +
           indices.to_string());
  return {{rows.type, shape{}}};
}

void l2_loss_rows_kernel(kernel_context& ctx) {
  const tensor &rows = ctx.input(0), &indices = ctx.input(1);
  detail::check_index_type(indices.type(), ctx.op);
  const auto& rd = rows.dims().dims();
  const auto& id = indices.dims().dims();
  if (rd.size() < id.size() || !std::equal(id.begin(), id.end(), rd.begin()))
    ctx.fail("rows " + rows.dims().to_string() + " do not start with the dims of indices " +
             indices.dims().to_string());
  const int64_t n = indices.num_elements();
  int64_t row_size = 1;
  for (size_t k = id.size(); k < rd.size(); ++k) row_size *= rd[k];
  std::vector<int64_t> index(static_cast<size_t>(n));
  detail::visit_index(indices.type(), [&](auto tag) {
    const auto* p = indices.data<decltype(tag)>();
    std::copy(p, p + n, index.begin());
  });
  visit_floating(rows.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    auto summed = detail::sum_repeated_rows<T>(rows, index, row_size);
    T total = 0;
    if (!summed.values.empty())
      reduce_rows<T, sum_half_squares_op<T>>(summed.values.data(), &total, 1,
                                             static_cast<int64_t>(summed.values.size()));
    ctx.allocate_output(0, rows.type(), shape{}).template mutable_data<T>()[0] = total;
  });
}

// ---- gradients -------------------------------------------------------------

// t (an output of the reduction, or its gradient) with the reduced dims put back
// as size 1, so that it broadcasts against the input.
output keep_reduced_dims(const grad_context& c, output t) {
  // Kept already, or everything reduced: a scalar broadcasts as it is.
  if (c.attr_or<bool>("keep_dims", false) || t.dims().rank() == 0) return t;
  const shape& in = c.input(0).dims();
  auto red = reduced_dims(in, c.attr_or<std::vector<int64_t>>("axes", {}), c.op);
  for (int k = 0; k < in.rank(); ++k)
    if (red[static_cast<size_t>(k)]) t = expand_dims(t, k);
  return t;
}

output reduce_like_forward(const grad_context& c, const char* op, output t) {
  return make_op(op, {t},
                 {{"axes", c.attr_or<std::vector<int64_t>>("axes", {})}, {"keep_dims", true}});
}

void sum_grad(grad_context& c) {
  c.input_grads = {broadcast_like(keep_reduced_dims(c, c.grad()), c.input(0))};
}

// The element count of each mean: a constant when the reduced dims are known,
// else read at run time (size(x) / size(y); a batch dim may be -1).
output mean_count(const grad_context& c) {
  const output& x = c.input(0);
  auto red = reduced_dims(x.dims(), c.attr_or<std::vector<int64_t>>("axes", {}), c.op);
  int64_t n = 1;
  for (int k = 0; k < x.dims().rank() && n >= 0; ++k)
    if (red[static_cast<size_t>(k)]) n = x.dims()[k] < 0 ? -1 : n * x.dims()[k];
  if (n >= 0) return scalar_like(c.grad(), static_cast<double>(n));
  auto out_size = size(c.outputs[0]);
  auto count = div(size(x), maximum(out_size, scalar_like(out_size, 1)));
  return cast(count, x.type());
}

void mean_grad(grad_context& c) {
  auto dy = div(keep_reduced_dims(c, c.grad()), mean_count(c));
  c.input_grads = {broadcast_like(dy, c.input(0))};
}

// Shared equally among the elements equal to the extreme value (as TensorFlow).
void extreme_grad(grad_context& c) {
  const output& x = c.input(0);
  auto hits = cast(equal(keep_reduced_dims(c, c.outputs[0]), x), x.type());
  auto count = reduce_like_forward(c, "sum", hits);
  c.input_grads = {mul(hits, div(keep_reduced_dims(c, c.grad()), count))};
}

// d prod / dx_i is the product of the other elements: prod / x_i when no element
// is zero; with one zero, the product of the others for the zero and 0 elsewhere;
// with more zeros, 0 everywhere. Computed without dividing by zero.
void prod_grad(grad_context& c) {
  const output& x = c.input(0);
  auto zero = scalar_like(x, 0), one = scalar_like(x, 1);
  auto is_zero = equal(x, zero);
  auto safe = select(is_zero, one, x);
  auto others = reduce_like_forward(c, "prod", safe);  // product of the non-zeros
  auto zeros = reduce_like_forward(c, "sum", cast(is_zero, x.type()));
  auto lone_zero = logical_and(is_zero, equal(zeros, one));
  auto d = select(equal(zeros, zero), div(others, safe), select(lone_zero, others, zero));
  c.input_grads = {mul(d, keep_reduced_dims(c, c.grad()))};
}

op_def reduction(const char* name, reduce_kind kind, const char* summary, grad_fn gradient) {
  return {.name = name,
          .num_inputs = 1,
          .infer = reduce_infer,
          .kernel = reduce_kernel(kind),
          .summary = summary,
          .gradient = std::move(gradient)};
}

const op_registrar registrations[] = {
    op_registrar(reduction("sum", reduce_kind::sum, "sum over attr axes (empty = all)", sum_grad)),
    op_registrar(
        reduction("mean", reduce_kind::mean, "mean over attr axes (empty = all)", mean_grad)),
    op_registrar(
        reduction("max", reduce_kind::max, "maximum over attr axes (empty = all)", extreme_grad)),
    op_registrar(
        reduction("min", reduce_kind::min, "minimum over attr axes (empty = all)", extreme_grad)),
    op_registrar(
        reduction("prod", reduce_kind::prod, "product over attr axes (empty = all)", prod_grad)),
    op_registrar({.name = "l2_loss",
                  .num_inputs = 1,
                  .infer = l2_loss_infer,
                  .kernel = l2_loss_kernel,
                  .summary = "sum(x^2) / 2 over all elements (a float scalar)",
                  .gradient = [](grad_context& c) { c.input_grads = {c.input(0) * c.grad()}; }}),
    op_registrar({.name = "l2_loss_rows",
                  .num_inputs = 2,  // (rows, indices)
                  .infer = l2_loss_rows_infer,
                  .kernel = l2_loss_rows_kernel,
                  .summary = "l2_loss of rows scatter-added at indices (repeats summed first), "
                             "without the dense tensor: a gathered gradient's norm for clipping",
                  // Made for clipping's norm, which the optimizer only reads.
                  .not_differentiable = true,
                  .host_memory_inputs = {1}}),
    op_registrar({.name = "argmax",
                  .num_inputs = 1,
                  .infer = arg_infer,
                  .kernel = arg_kernel<true>,
                  .summary = "int64 index of the maximum along attr axis",
                  .not_differentiable = true}),
    op_registrar({.name = "argmin",
                  .num_inputs = 1,
                  .infer = arg_infer,
                  .kernel = arg_kernel<false>,
                  .summary = "int64 index of the minimum along attr axis",
                  .not_differentiable = true}),
    op_registrar(
        {.name = "sum_to_shape_of",
         .num_inputs = 2,
         .infer = sum_to_infer,
         .kernel = sum_to_kernel,
         .summary = "sums input 0 down to the run-time shape of input 1 (undoes "
                    "broadcasting)",
         .gradient =
             [](grad_context& c) { c.input_grads = {broadcast_like(c.grad(), c.input(0))}; }}),
};

output reduce_op(const char* op, output x, std::vector<int64_t> axes, bool keep_dims,
                 const std::string& name) {
  return make_op(op, {x}, {{"axes", std::move(axes)}, {"keep_dims", keep_dims}}, name);
}

}  // namespace

output reduce_sum(output x, std::vector<int64_t> axes, bool keep_dims, const std::string& name) {
  return reduce_op("sum", x, std::move(axes), keep_dims, name);
}
output reduce_mean(output x, std::vector<int64_t> axes, bool keep_dims, const std::string& name) {
  return reduce_op("mean", x, std::move(axes), keep_dims, name);
}
output reduce_max(output x, std::vector<int64_t> axes, bool keep_dims, const std::string& name) {
  return reduce_op("max", x, std::move(axes), keep_dims, name);
}
output reduce_min(output x, std::vector<int64_t> axes, bool keep_dims, const std::string& name) {
  return reduce_op("min", x, std::move(axes), keep_dims, name);
}
output reduce_prod(output x, std::vector<int64_t> axes, bool keep_dims, const std::string& name) {
  return reduce_op("prod", x, std::move(axes), keep_dims, name);
}

output l2_loss(output x, const std::string& name) { return make_op("l2_loss", {x}, {}, name); }
output l2_loss_rows(output rows, output indices, const std::string& name) {
  return make_op("l2_loss_rows", {rows, indices}, {}, name);
}

output argmax(output x, int64_t axis, const std::string& name) {
  return make_op("argmax", {x}, {{"axis", axis}}, name);
}
output argmin(output x, int64_t axis, const std::string& name) {
  return make_op("argmin", {x}, {{"axis", axis}}, name);
}

output sum_to_shape_of(output x, output like, const std::string& name) {
  return make_op("sum_to_shape_of", {x, like}, {}, name);
}

}  // namespace actorflow
