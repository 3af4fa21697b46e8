// Indexing ops: gather, its adjoint scatter_add_like, and one_hot.
#include <algorithm>

#include "ops/array.hpp"
#include "ops/array_util.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

using detail::check_index_type;
using detail::checked_indices;
using detail::visit_index;

namespace {

// ---- gather ----------------------------------------------------------------

std::vector<tensor_spec> gather_infer(const shape_context& c) {
  auto& params = c.inputs[0];
  auto& indices = c.inputs[1];
  check_index_type(indices.type, c.op);
  if (params.dims.rank() == 0) c.fail("cannot gather from a scalar");
  int axis = normalize_axis(c.attr_or<int64_t>("axis", 0), params.dims.rank(), c.op);
  const auto& pd = params.dims.dims();
  std::vector<int64_t> out(pd.begin(), pd.begin() + axis);
  out.insert(out.end(), indices.dims.dims().begin(), indices.dims.dims().end());
  out.insert(out.end(), pd.begin() + axis + 1, pd.end());
  return {{params.type, shape(out)}};
}

void gather_kernel(kernel_context& ctx) {
  const tensor& params = ctx.input(0);
  const tensor& indices = ctx.input(1);
  check_index_type(indices.type(), ctx.op);
  if (params.rank() == 0) ctx.fail("cannot gather from a scalar");
  int axis = normalize_axis(ctx.attr_or<int64_t>("axis", 0), params.rank(), ctx.op);
  const auto& pd = params.dims().dims();
  int64_t outer = 1, inner = 1, d = pd[static_cast<size_t>(axis)];
  for (int k = 0; k < axis; ++k) outer *= pd[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < pd.size(); ++k) inner *= pd[k];
  std::vector<int64_t> out_dims(pd.begin(), pd.begin() + axis);
  out_dims.insert(out_dims.end(), indices.dims().dims().begin(), indices.dims().dims().end());
  out_dims.insert(out_dims.end(), pd.begin() + axis + 1, pd.end());
  tensor& out = ctx.allocate_output(0, params.type(), shape(out_dims));
  int64_t n = indices.num_elements();
  auto idx = checked_indices(ctx, indices, axis, d, "params " + params.dims().to_string());
  if (out.num_elements() == 0) return;
  detail::visit_elem_size(dtype_size(params.type()), [&](auto tag) {
    using U = decltype(tag);
    const U* src = static_cast<const U*>(params.raw_data());
    U* dst = static_cast<U*>(out.raw_mutable_data());
    int64_t grain = std::max<int64_t>(1, parallel_grain / inner);
    parallel_for(outer * n, grain, [&](int64_t b, int64_t e) {
      int64_t o = b / n, j = b % n;
      for (int64_t u = b; u < e; ++u) {
        const U* s = src + (o * d + idx[static_cast<size_t>(j)]) * inner;
        U* t = dst + u * inner;
        if (inner == 1)
          *t = *s;
        else
          std::copy_n(s, inner, t);
        if (++j == n) j = 0, ++o;
      }
    });
  });
}

// ---- scatter_add_like --------------------------------------------------------

// The shape gather(like, indices, axis) would have: like[:axis] + indices + like[axis+1:].
shape gathered_shape(const shape& like, const shape& indices, int axis) {
  const auto& ld = like.dims();
  std::vector<int64_t> out(ld.begin(), ld.begin() + axis);
  out.insert(out.end(), indices.dims().begin(), indices.dims().end());
  out.insert(out.end(), ld.begin() + axis + 1, ld.end());
  return shape(out);
}

std::vector<tensor_spec> scatter_add_infer(const shape_context& c) {
  auto& updates = c.inputs[0];
  auto& indices = c.inputs[1];
  shape like = c.inputs[2].dims;
  check_index_type(indices.type, c.op);
  if (updates.type == dtype::boolean) c.fail("bool is not a numeric type");
  if (like.rank() == 0) c.fail("cannot scatter into a scalar");
  int axis = normalize_axis(c.attr_or<int64_t>("axis", 0), like.rank(), c.op);
  shape want = gathered_shape(like, indices.dims, axis);
  if (!updates.dims.compatible_with(want))
    c.fail("updates " + updates.dims.to_string() + " do not match " + want.to_string() +
           ", the shape of gathering from " + like.to_string() + " at indices " +
           indices.dims.to_string() + " along axis " + std::to_string(axis));
  // The dims of like outside the axis also show in updates.
  int tail = like.rank() - axis - 1;
  for (int k = 0; k < like.rank(); ++k) {
    int from = k < axis ? k : updates.dims.rank() - tail + (k - axis - 1);
    if (like[k] < 0 && k != axis) like[k] = updates.dims[from];
  }
  return {{updates.type, like}};
}

// Integers add with wrap-around, as the math ops do.
template <class T>
T add_wrapping(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

// out[o, idx[j], c] += upd[o, j, c]. Tasks own disjoint (o, column block) pairs and add
// the updates in index order, so the sums do not depend on how the work was split.
template <class T>
void scatter_add(const T* upd, const std::vector<int64_t>& idx, T* out, int64_t outer, int64_t d,
                 int64_t inner) {
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t cw = std::min<int64_t>(inner, 1024);
  const int64_t blocks = (inner + cw - 1) / cw;
  int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(1, n * cw));
  parallel_for(outer * blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      int64_t o = u / blocks, c0 = (u % blocks) * cw, c1 = std::min(inner, c0 + cw);
      for (int64_t j = 0; j < n; ++j) {
        T* dst = out + (o * d + idx[static_cast<size_t>(j)]) * inner;
        const T* src = upd + (o * n + j) * inner;
        for (int64_t c = c0; c < c1; ++c) dst[c] = add_wrapping(dst[c], src[c]);
      }
    }
  });
}

void scatter_add_kernel(kernel_context& ctx) {
  const tensor& updates = ctx.input(0);
  const tensor& indices = ctx.input(1);
  const shape& like = ctx.input(2).dims();
  check_index_type(indices.type(), ctx.op);
  if (like.rank() == 0) ctx.fail("cannot scatter into a scalar");
  int axis = normalize_axis(ctx.attr_or<int64_t>("axis", 0), like.rank(), ctx.op);
  shape want = gathered_shape(like, indices.dims(), axis);
  if (updates.dims() != want)
    ctx.fail("updates " + updates.dims().to_string() + " do not match " + want.to_string() +
             ", the shape of gathering from " + like.to_string() + " at indices " +
             indices.dims().to_string() + " along axis " + std::to_string(axis));
  const auto& ld = like.dims();
  int64_t outer = 1, inner = 1, d = ld[static_cast<size_t>(axis)];
  for (int k = 0; k < axis; ++k) outer *= ld[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(axis) + 1; k < ld.size(); ++k) inner *= ld[k];
  auto idx = checked_indices(ctx, indices, axis, d, "the output " + like.to_string());
  tensor& out = ctx.allocate_output(0, updates.type(), like);
  visit_numeric(updates.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      T* o = out.mutable_data<T>();
      std::fill(o, o + out.num_elements(), T(0));
      if (updates.num_elements() > 0) scatter_add<T>(updates.data<T>(), idx, o, outer, d, inner);
    }
  });
}

// ---- one_hot ---------------------------------------------------------------

std::vector<tensor_spec> one_hot_infer(const shape_context& c) {
  auto& indices = c.inputs[0];
  check_index_type(indices.type, c.op);
  int64_t depth = c.attr<int64_t>("depth");
  if (depth < 0) c.fail("depth must not be negative, got " + std::to_string(depth));
  dtype type = c.attr_or<dtype>("dtype", dtype::float32);
  if (type == dtype::bfloat16) fail_no_bfloat16_kernel(c.op);
  visit_dtype(type, [&](auto tag) {
    using T = decltype(tag);
    detail::cast_value<T>(c.attr_or<double>("on_value", 1), c.op, "on_value");
    detail::cast_value<T>(c.attr_or<double>("off_value", 0), c.op, "off_value");
  });
  auto d = indices.dims.dims();
  d.push_back(depth);
  return {{type, shape(d)}};
}

void one_hot_kernel(kernel_context& ctx) {
  const tensor& indices = ctx.input(0);
  check_index_type(indices.type(), ctx.op);
  int64_t depth = ctx.attr<int64_t>("depth");
  if (depth < 0) ctx.fail("depth must not be negative, got " + std::to_string(depth));
  dtype type = ctx.attr_or<dtype>("dtype", dtype::float32);
  auto d = indices.dims().dims();
  d.push_back(depth);
  tensor& out = ctx.allocate_output(0, type, shape(d));
  int64_t n = indices.num_elements();
  if (out.num_elements() == 0) return;
  visit_dtype(type, [&](auto tag) {
    using T = decltype(tag);
    T on = detail::cast_value<T>(ctx.attr_or<double>("on_value", 1), ctx.op, "on_value");
    T off = detail::cast_value<T>(ctx.attr_or<double>("off_value", 0), ctx.op, "off_value");
    T* o = out.mutable_data<T>();
    visit_index(indices.type(), [&](auto itag) {
      using I = decltype(itag);
      const I* p = indices.data<I>();
      int64_t grain = std::max<int64_t>(1, parallel_grain / depth);
      parallel_for(n, grain, [&](int64_t b, int64_t e) {
        std::fill(o + b * depth, o + e * depth, off);
        for (int64_t i = b; i < e; ++i)
          if (p[i] >= 0 && p[i] < depth) o[i * depth + p[i]] = on;
      });
    });
  });
}

// ---- scatter_add_into ---------------------------------------------------------

std::vector<tensor_spec> scatter_add_into_infer(const shape_context& c) {
  auto& base = c.inputs[0];
  auto& updates = c.inputs[1];
  auto& indices = c.inputs[2];
  check_index_type(indices.type, c.op);
  if (updates.type != base.type)
    c.fail("updates are " + updates.to_string() + ", base is " + base.to_string());
  if (base.dims.rank() == 0) c.fail("cannot scatter into a scalar");
  shape want = gathered_shape(base.dims, indices.dims, 0);
  if (!updates.dims.compatible_with(want))
    c.fail("updates " + updates.dims.to_string() + " do not match " + want.to_string() +
           ", the shape of gathering from " + base.dims.to_string() + " at indices " +
           indices.dims.to_string());
  return {base};
}

// base with the updates added at indices (dim 0). In place when base's
// buffer has no other holder: a loop's gradient adds one row per iteration
// into an accumulator that goes round the loop, and a copy of the whole
// accumulator per row would cost more than the rest of the iteration.
void scatter_add_into_kernel(kernel_context& ctx) {
  tensor base = std::move(ctx.inputs[0]);
  const tensor& updates = ctx.input(1);
  const tensor& indices = ctx.input(2);
  check_index_type(indices.type(), ctx.op);
  if (base.rank() == 0) ctx.fail("cannot scatter into a scalar");
  if (updates.type() != base.type()) ctx.fail("updates and base differ in dtype");
  shape want = gathered_shape(base.dims(), indices.dims(), 0);
  if (updates.dims() != want)
    ctx.fail("updates " + updates.dims().to_string() + " do not match " + want.to_string() +
             ", the shape of gathering from " + base.dims().to_string() + " at indices " +
             indices.dims().to_string());
  const auto& bd = base.dims().dims();
  int64_t d = bd[0], inner = 1;
  for (size_t k = 1; k < bd.size(); ++k) inner *= bd[k];
  auto idx = checked_indices(ctx, indices, 0, d, "the base " + base.dims().to_string());
  if (!base.is_unique()) base = base.clone();
  visit_numeric(base.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      if (updates.num_elements() > 0)
        scatter_add<T>(updates.data<T>(), idx, base.mutable_data<T>(), 1, d, inner);
    }
  });
  ctx.set_output(0, std::move(base));
}

const op_registrar registrations[] = {
    op_registrar({.name = "gather",
                  .num_inputs = 2,
                  .infer = gather_infer,
                  .kernel = gather_kernel,
                  .summary = "slices of params at indices along attr axis",
                  .gradient =
                      [](grad_context& c) {
                        c.input_grads = {scatter_add_like(c.grad(), c.input(1), c.input(0),
                                                          c.attr_or<int64_t>("axis", 0))};
                      },
                  .host_memory_inputs = {1}}),
    op_registrar({.name = "one_hot",
                  .num_inputs = 1,
                  .infer = one_hot_infer,
                  .kernel = one_hot_kernel,
                  .summary = "one-hot rows of attr depth (on_value, off_value, dtype)",
                  .not_differentiable = true}),
    op_registrar({.name = "scatter_add_like",
                  .num_inputs = 3,
                  .infer = scatter_add_infer,
                  .kernel = scatter_add_kernel,
                  .summary = "zeros shaped like input 2, plus the updates added at indices along "
                             "attr axis (the adjoint of gather)",
                  .gradient =
                      [](grad_context& c) {
                        c.input_grads = {
                            gather(c.grad(), c.input(1), c.attr_or<int64_t>("axis", 0))};
                      },
                  .host_memory_inputs = {1}}),
    op_registrar({.name = "scatter_add_into",
                  .num_inputs = 3,
                  .infer = scatter_add_into_infer,
                  .kernel = scatter_add_into_kernel,
                  .summary = "base with the updates added at indices along dim 0 (in place "
                             "when base has no other holder)",
                  .gradient =
                      [](grad_context& c) {
                        c.input_grads = {c.grad(), gather(c.grad(), c.input(2))};
                      },
                  .host_memory_inputs = {2}}),
};

}  // namespace

output gather(output params, output indices, int64_t axis, const std::string& name) {
  return make_op("gather", {params, indices}, {{"axis", axis}}, name);
}

output one_hot(output indices, int64_t depth, double on_value, double off_value, dtype type,
               const std::string& name) {
  return make_op(
      "one_hot", {indices},
      {{"depth", depth}, {"on_value", on_value}, {"off_value", off_value}, {"dtype", type}}, name);
}

output scatter_add_into(output base, output updates, output indices, const std::string& name) {
  return make_op("scatter_add_into", {base, updates, indices}, {}, name);
}

output scatter_add_like(output updates, output indices, output like, int64_t axis,
                        const std::string& name) {
  return make_op("scatter_add_like", {updates, indices, like}, {{"axis", axis}}, name);
}

}  // namespace actorflow
