// Ops that cut and join tensors: concat, split, split_like, slice, pad, tile.
#include <algorithm>
#include <cstring>

#include "ops/array.hpp"
#include "ops/array_util.hpp"
#include "ops/op_util.hpp"
#include "ops/reduce.hpp"

namespace actorflow {

namespace {

using detail::list_to_string;

int64_t prod(const std::vector<int64_t>& d, size_t b, size_t e) {
  int64_t n = 1;
  for (size_t i = b; i < e; ++i) n *= d[i];
  return n;
}

// ---- concat ----------------------------------------------------------------

std::vector<tensor_spec> concat_infer_specs(const std::vector<tensor_spec>& ins,
                                            const attr_map& attrs, const std::string& op) {
  const auto& first = ins[0];
  int r = first.dims.rank();
  if (r == 0) fail(op, "cannot concatenate scalars; expand_dims them first");
  int axis = normalize_axis(get_attr<int64_t>(attrs, "axis", op), r, op);
  auto out = first.dims.dims();
  for (size_t i = 1; i < ins.size(); ++i) {
    const auto& in = ins[i];
    std::string which = "input " + std::to_string(i);
    if (in.type != first.type)
      fail(op, which + " is " + dtype_name(in.type) + " but input 0 is " + dtype_name(first.type));
    if (in.dims.rank() != r)
      fail(op, which + " has shape " + in.dims.to_string() + " of rank " +
                   std::to_string(in.dims.rank()) + ", input 0 has " + first.dims.to_string());
    for (int k = 0; k < r; ++k) {
      int64_t d = in.dims[k];
      auto& o = out[static_cast<size_t>(k)];
      if (k == axis) {
        o = (o < 0 || d < 0) ? -1 : o + d;
      } else if (o < 0) {
        o = d;
      } else if (d >= 0 && d != o) {
        fail(op, which + " has shape " + in.dims.to_string() + ", which differs from " +
                     first.dims.to_string() + " outside axis " + std::to_string(axis));
      }
    }
  }
  return {{first.type, shape(out)}};
}

void concat_kernel(kernel_context& ctx) {
  std::vector<tensor_spec> specs;
  for (auto& t : ctx.inputs) specs.push_back({t.type(), t.dims()});
  auto out_spec = concat_infer_specs(specs, ctx.attrs, ctx.op)[0];
  if (ctx.inputs.size() == 1) return ctx.set_output(0, ctx.inputs[0]);
  int axis = normalize_axis(ctx.attr<int64_t>("axis"), out_spec.dims.rank(), ctx.op);
  tensor& out = ctx.allocate_output(0, out_spec.type, out_spec.dims);
  const auto& od = out_spec.dims.dims();
  size_t elem = dtype_size(out.type());
  int64_t outer = prod(od, 0, static_cast<size_t>(axis));
  int64_t inner = prod(od, static_cast<size_t>(axis), od.size());  // one output row
  std::vector<size_t> row_bytes;
  for (auto& t : ctx.inputs)
    row_bytes.push_back(static_cast<size_t>(t.num_elements() / std::max<int64_t>(outer, 1)) * elem);
  if (out.num_elements() == 0) return;
  auto* dst = static_cast<std::byte*>(out.raw_mutable_data());
  int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(inner, 1));
  parallel_for(outer, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      std::byte* d = dst + static_cast<size_t>(o * inner) * elem;
      for (size_t i = 0; i < ctx.inputs.size(); ++i) {
        if (!row_bytes[i]) continue;
        auto* src = static_cast<const std::byte*>(ctx.inputs[i].raw_data());
        std::memcpy(d, src + static_cast<size_t>(o) * row_bytes[i], row_bytes[i]);
        d += row_bytes[i];
      }
    }
  });
}

// ---- split -----------------------------------------------------------------

// The size of each part along the axis (-1 where unknown at build time).
std::vector<int64_t> split_parts(const shape& in, const attr_map& attrs, const std::string& op,
                                 int& axis) {
  if (in.rank() == 0) fail(op, "cannot split a scalar");
  axis = normalize_axis(get_attr_or<int64_t>(attrs, "axis", op, 0), in.rank(), op);
  bool by_count = attrs.count("num_splits"), by_sizes = attrs.count("sizes");
  if (by_count == by_sizes) fail(op, "needs exactly one of the attributes num_splits and sizes");
  int64_t d = in[axis];
  std::string where = "axis " + std::to_string(axis) + " of " + in.to_string();
  if (by_count) {
    int64_t n = get_attr<int64_t>(attrs, "num_splits", op);
    if (n < 1) fail(op, "num_splits must be at least 1, got " + std::to_string(n));
    if (d >= 0 && d % n != 0)
      fail(op, where + " has size " + std::to_string(d) + ", not divisible into " +
                   std::to_string(n) + " equal parts");
    return std::vector<int64_t>(static_cast<size_t>(n), d < 0 ? -1 : d / n);
  }
  auto sizes = get_attr<std::vector<int64_t>>(attrs, "sizes", op);
  if (sizes.empty()) fail(op, "sizes is empty");
  int rest_at = -1;
  int64_t sum = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1 && rest_at < 0) {
      rest_at = static_cast<int>(i);
    } else if (sizes[i] < 0) {
      fail(op, "sizes " + list_to_string(sizes) + " may hold one -1 and no other negative value");
    } else {
      sum += sizes[i];
    }
  }
  if (d >= 0) {
    if ((rest_at < 0 && sum != d) || (rest_at >= 0 && sum > d))
      fail(op, "sizes " + list_to_string(sizes) + " do not add up to the size " +
                   std::to_string(d) + " of " + where);
    if (rest_at >= 0) sizes[static_cast<size_t>(rest_at)] = d - sum;
  }
  return sizes;
}

std::vector<tensor_spec> split_infer(const shape_context& c) {
  int axis = 0;
  auto parts = split_parts(c.inputs[0].dims, c.attrs, c.op, axis);
  std::vector<tensor_spec> out;
  for (auto p : parts) {
    auto d = c.inputs[0].dims.dims();
    d[static_cast<size_t>(axis)] = p;
    out.push_back({c.inputs[0].type, shape(d)});
  }
  return out;
}

// Cuts x along axis into outputs of the given sizes (which add up to x's size there).
void split_into(kernel_context& ctx, const tensor& x, int axis, const std::vector<int64_t>& parts) {
  const auto& xd = x.dims().dims();
  size_t elem = dtype_size(x.type());
  int64_t outer = prod(xd, 0, static_cast<size_t>(axis));
  int64_t inner = prod(xd, static_cast<size_t>(axis) + 1, xd.size());
  std::vector<std::byte*> dst;
  for (size_t j = 0; j < parts.size(); ++j) {
    auto d = xd;
    d[static_cast<size_t>(axis)] = parts[j];
    dst.push_back(
        static_cast<std::byte*>(ctx.allocate_output(j, x.type(), shape(d)).raw_mutable_data()));
  }
  if (x.num_elements() == 0) return;
  auto* src = static_cast<const std::byte*>(x.raw_data());
  size_t in_row = static_cast<size_t>(xd[static_cast<size_t>(axis)] * inner) * elem;
  int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(inner, 1));
  parallel_for(outer, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const std::byte* s = src + static_cast<size_t>(o) * in_row;
      for (size_t j = 0; j < parts.size(); ++j) {
        size_t bytes = static_cast<size_t>(parts[j] * inner) * elem;
        if (bytes) std::memcpy(dst[j] + static_cast<size_t>(o) * bytes, s, bytes);
        s += bytes;
      }
    }
  });
}

void split_kernel(kernel_context& ctx) {
  int axis = 0;
  auto parts = split_parts(ctx.input(0).dims(), ctx.attrs, ctx.op, axis);
  split_into(ctx, ctx.input(0), axis, parts);
}

// ---- split_like --------------------------------------------------------------

// split_like(x, like_1, ..., like_n): part i is as long along axis as like_i.
int split_like_axis(const std::vector<shape>& dims, const attr_map& attrs, const std::string& op) {
  int r = dims[0].rank();
  if (r == 0) fail(op, "cannot split a scalar");
  int axis = normalize_axis(get_attr_or<int64_t>(attrs, "axis", op, 0), r, op);
  for (size_t i = 1; i < dims.size(); ++i)
    if (dims[i].rank() != r)
      fail(op, "input " + std::to_string(i) + " has shape " + dims[i].to_string() +
                   ", not of the rank of x " + dims[0].to_string());
  return axis;
}

std::vector<tensor_spec> split_like_infer(const shape_context& c) {
  std::vector<shape> dims;
  for (auto& in : c.inputs) dims.push_back(in.dims);
  int axis = split_like_axis(dims, c.attrs, c.op);
  int64_t sum = 0;
  std::vector<tensor_spec> out;
  for (size_t i = 1; i < dims.size(); ++i) {
    int64_t d = dims[i][axis];
    sum = (sum < 0 || d < 0) ? -1 : sum + d;
    shape part = dims[0];
    part[axis] = d;
    out.push_back({c.inputs[0].type, part});
  }
  if (sum >= 0 && dims[0][axis] >= 0 && sum != dims[0][axis])
    c.fail("the parts' sizes along axis " + std::to_string(axis) + " add up to " +
           std::to_string(sum) + ", not to the size of x " + dims[0].to_string());
  return out;
}

void split_like_kernel(kernel_context& ctx) {
  std::vector<shape> dims;
  for (auto& in : ctx.inputs) dims.push_back(in.dims());
  int axis = split_like_axis(dims, ctx.attrs, ctx.op);
  std::vector<int64_t> parts;
  int64_t sum = 0;
  for (size_t i = 1; i < dims.size(); ++i) {
    parts.push_back(dims[i][axis]);
    sum += parts.back();
  }
  if (sum != dims[0][axis])
    ctx.fail("the parts' sizes along axis " + std::to_string(axis) + " add up to " +
             std::to_string(sum) + ", not to the size of x " + dims[0].to_string());
  split_into(ctx, ctx.input(0), axis, parts);
}

// ---- slice -----------------------------------------------------------------

shape slice_shape(const shape& in, const attr_map& attrs, const std::string& op) {
  auto begin = get_attr<std::vector<int64_t>>(attrs, "begin", op);
  auto size = get_attr<std::vector<int64_t>>(attrs, "size", op);
  if (static_cast<int>(begin.size()) != in.rank() || static_cast<int>(size.size()) != in.rank())
    fail(op, "begin " + list_to_string(begin) + " and size " + list_to_string(size) +
                 " must each have one entry per dim of " + in.to_string());
  std::vector<int64_t> out;
  for (int k = 0; k < in.rank(); ++k) {
    int64_t b = begin[static_cast<size_t>(k)], s = size[static_cast<size_t>(k)], d = in[k];
    std::string where = " of dim " + std::to_string(k) + " in " + in.to_string();
    if (b < 0) fail(op, "begin " + std::to_string(b) + " is negative" + where);
    if (s < -1) fail(op, "size " + std::to_string(s) + " is negative" + where);
    if (d >= 0 && b > d) fail(op, "begin " + std::to_string(b) + " is past the end" + where);
    if (d >= 0 && s >= 0 && b + s > d)
      fail(op, "begin " + std::to_string(b) + " + size " + std::to_string(s) + " is past the end" +
                   where);
    out.push_back(s >= 0 ? s : (d >= 0 ? d - b : -1));
  }
  return shape(out);
}

void slice_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  shape out_dims = slice_shape(x.dims(), ctx.attrs, ctx.op);
  if (out_dims == x.dims()) return ctx.set_output(0, x);
  tensor& out = ctx.allocate_output(0, x.type(), out_dims);
  if (out.num_elements() == 0) return;
  auto begin = ctx.attr<std::vector<int64_t>>("begin");
  auto xs = detail::dense_strides(x.dims().dims());
  int64_t offset = 0;
  for (size_t k = 0; k < xs.size(); ++k) offset += begin[k] * xs[k];
  size_t elem = dtype_size(x.type());
  detail::strided_copy(elem, static_cast<const std::byte*>(x.raw_data()) + offset * elem, xs,
                       out.raw_mutable_data(), detail::dense_strides(out_dims.dims()),
                       out_dims.dims());
}

// ---- pad -------------------------------------------------------------------

std::vector<int64_t> get_paddings(const shape& in, const attr_map& attrs, const std::string& op) {
  auto p = get_attr<std::vector<int64_t>>(attrs, "paddings", op);
  if (static_cast<int>(p.size()) != 2 * in.rank())
    fail(op, "paddings " + list_to_string(p) + " must hold a (before, after) pair per dim of " +
                 in.to_string());
  for (auto v : p)
    if (v < 0) fail(op, "paddings " + list_to_string(p) + " must not be negative");
  return p;
}

std::vector<tensor_spec> pad_infer(const shape_context& c) {
  auto& in = c.inputs[0];
  auto p = get_paddings(in.dims, c.attrs, c.op);
  auto d = in.dims.dims();
  for (size_t k = 0; k < d.size(); ++k)
    if (d[k] >= 0) d[k] += p[2 * k] + p[2 * k + 1];
  // Checks the fill value fits the dtype at build time (any double converts to bfloat16).
  if (in.type != dtype::bfloat16)
    visit_dtype(in.type, [&](auto tag) {
      detail::cast_value<decltype(tag)>(c.attr_or<double>("value", 0), c.op, "value");
    });
  return {{in.type, shape(d)}};
}

void pad_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  auto p = get_paddings(x.dims(), ctx.attrs, ctx.op);
  auto d = x.dims().dims();
  bool none = std::all_of(p.begin(), p.end(), [](int64_t v) { return v == 0; });
  if (none) return ctx.set_output(0, x);
  for (size_t k = 0; k < d.size(); ++k) d[k] += p[2 * k] + p[2 * k + 1];
  tensor& out = ctx.allocate_output(0, x.type(), shape(d));
  detail::fill_value(out, ctx.attr_or<double>("value", 0), ctx.op);
  if (x.num_elements() == 0) return;
  auto os = detail::dense_strides(d);
  int64_t offset = 0;
  for (size_t k = 0; k < d.size(); ++k) offset += p[2 * k] * os[k];
  size_t elem = dtype_size(x.type());
  detail::strided_copy(elem, x.raw_data(), detail::dense_strides(x.dims().dims()),
                       static_cast<std::byte*>(out.raw_mutable_data()) + offset * elem, os,
                       x.dims().dims());
}

// ---- tile ------------------------------------------------------------------

std::vector<int64_t> get_multiples(const shape& in, const attr_map& attrs, const std::string& op) {
  auto m = get_attr<std::vector<int64_t>>(attrs, "multiples", op);
  if (static_cast<int>(m.size()) != in.rank())
    fail(op,
         "multiples " + list_to_string(m) + " must have one entry per dim of " + in.to_string());
  for (auto v : m)
    if (v < 0) fail(op, "multiples " + list_to_string(m) + " must not be negative");
  return m;
}

std::vector<tensor_spec> tile_infer(const shape_context& c) {
  auto& in = c.inputs[0];
  auto m = get_multiples(in.dims, c.attrs, c.op);
  auto d = in.dims.dims();
  for (size_t k = 0; k < d.size(); ++k) {
    if (d[k] > 0 && m[k] > INT64_MAX / d[k])
      c.fail("multiples " + list_to_string(m) + " overflow the dims of " + in.dims.to_string());
    d[k] = m[k] == 0 ? 0 : (d[k] < 0 ? -1 : d[k] * m[k]);
  }
  return {{in.type, shape(d)}};
}

void tile_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  auto m = get_multiples(x.dims(), ctx.attrs, ctx.op);
  const auto& xd = x.dims().dims();
  auto xs = detail::dense_strides(xd);
  // The output seen as (m0, d0, m1, d1, ...) is x broadcast along the m dims.
  std::vector<int64_t> dims, src, out_dims;
  for (size_t k = 0; k < xd.size(); ++k) {
    if (xd[k] > 0 && m[k] > INT64_MAX / xd[k])
      ctx.fail("multiples " + list_to_string(m) + " overflow the dims of " + x.dims().to_string());
    dims.insert(dims.end(), {m[k], xd[k]});
    src.insert(src.end(), {0, xs[k]});
    out_dims.push_back(m[k] * xd[k]);
  }
  tensor& out = ctx.allocate_output(0, x.type(), shape(out_dims));
  detail::strided_copy(dtype_size(x.type()), x.raw_data(), src, out.raw_mutable_data(),
                       detail::dense_strides(dims), dims);
}

// ---- gradients -------------------------------------------------------------
// Shapes come from attributes, so a dim unknown at build time can leave the
// gradient's shape undetermined; those rare cases fail naming the op and shape.

[[noreturn]] void fail_unknown(const grad_context& c, const std::string& what) {
  fail(c.op, "cannot form the gradient of node '" + c.node_name + "': " + what);
}

void concat_grad(grad_context& c) {
  int axis = normalize_axis(c.attr<int64_t>("axis"), c.input(0).dims().rank(), c.op);
  std::vector<int64_t> sizes;
  int unknown = 0;
  for (auto& in : c.inputs) {
    sizes.push_back(in.dims()[axis]);
    unknown += sizes.back() < 0;
  }
  if (c.inputs.size() == 1) {
    c.input_grads = {c.grad()};
    return;
  }
  if (unknown <= 1) {
    c.input_grads = split_sizes(c.grad(), sizes, axis);
    return;
  }
  // The sizes along the axis are known only at run time.
  std::vector<output> ins = {c.grad()};
  ins.insert(ins.end(), c.inputs.begin(), c.inputs.end());
  c.input_grads = make_op_outputs("split_like", ins, {{"axis", int64_t{axis}}});
}

void split_grad(grad_context& c) {
  c.input_grads = {concat(c.grads, c.attr_or<int64_t>("axis", 0))};
}

// Zeros around the slice: pad by begin before and by what the slice left after.
void slice_grad(grad_context& c) {
  const shape& in = c.input(0).dims();
  auto begin = c.attr<std::vector<int64_t>>("begin");
  auto size = c.attr<std::vector<int64_t>>("size");
  std::vector<int64_t> paddings;
  for (int k = 0; k < in.rank(); ++k) {
    auto u = static_cast<size_t>(k);
    if (size[u] >= 0 && in[k] < 0)
      fail_unknown(c, "dim " + std::to_string(k) + " of the input " + in.to_string() +
                          " is unknown and the slice does not reach its end");
    paddings.push_back(begin[u]);
    paddings.push_back(size[u] < 0 ? 0 : in[k] - begin[u] - size[u]);
  }
  c.input_grads = {pad(c.grad(), paddings)};
}

void pad_grad(grad_context& c) {
  const shape& in = c.input(0).dims();
  auto p = get_paddings(in, c.attrs, c.op);
  std::vector<int64_t> begin, size;
  for (int k = 0; k < in.rank(); ++k) {
    auto u = static_cast<size_t>(k);
    if (in[k] < 0 && p[2 * u + 1] > 0)
      fail_unknown(c, "dim " + std::to_string(k) + " of the input " + in.to_string() +
                          " is unknown and padded after its end");
    begin.push_back(p[2 * u]);
    size.push_back(in[k]);  // -1 (to the end) only where nothing was padded after
  }
  c.input_grads = {slice(c.grad(), begin, size)};
}

// The output seen as (m0, d0, m1, d1, ...) summed over the m dims.
void tile_grad(grad_context& c) {
  const output& x = c.input(0);
  auto m = get_multiples(x.dims(), c.attrs, c.op);
  if (std::find(m.begin(), m.end(), 0) != m.end()) {
    c.input_grads = {zeros_like(x)};
    return;
  }
  std::vector<int64_t> split_dims, axes;
  int unknown = 0;
  for (int k = 0; k < x.dims().rank(); ++k) {
    int64_t mk = m[static_cast<size_t>(k)], dk = x.dims()[k];
    if (mk != 1) {
      axes.push_back(static_cast<int64_t>(split_dims.size()));
      split_dims.push_back(mk);
    }
    split_dims.push_back(dk);
    unknown += dk < 0;
  }
  if (axes.empty()) {
    c.input_grads = {c.grad()};
    return;
  }
  if (unknown > 1)
    fail_unknown(c, "the input " + x.dims().to_string() + " has more than one unknown dim");
  c.input_grads = {reduce_sum(reshape(c.grad(), split_dims), axes)};
}

const op_registrar registrations[] = {
    op_registrar(
        {.name = "concat",
         .num_inputs = -1,
         .min_inputs = 1,
         .infer =
             [](const shape_context& c) { return concat_infer_specs(c.inputs, c.attrs, c.op); },
         .kernel = concat_kernel,
         .summary = "joins tensors along attr axis",
         .gradient = concat_grad}),
    op_registrar({.name = "split",
                  .num_inputs = 1,
                  .infer = split_infer,
                  .kernel = split_kernel,
                  .summary = "splits along attr axis into num_splits equal parts or sizes",
                  .gradient = split_grad}),
    op_registrar({.name = "split_like",
                  .num_inputs = -1,
                  .min_inputs = 2,
                  .infer = split_like_infer,
                  .kernel = split_like_kernel,
                  .summary = "splits input 0 along attr axis into parts as long there as inputs "
                             "1.. are at run time (the gradient of concat)",
                  .gradient =
                      [](grad_context& c) {
                        c.input_grads = {concat(c.grads, c.attr_or<int64_t>("axis", 0))};
                      }}),
    op_registrar({.name = "slice",
                  .num_inputs = 1,
                  .infer =
                      [](const shape_context& c) {
                        return std::vector<tensor_spec>{
                            {c.inputs[0].type, slice_shape(c.inputs[0].dims, c.attrs, c.op)}};
                      },
                  .kernel = slice_kernel,
                  .summary = "a block at attr begin of attr size (-1: to the end)",
                  .gradient = slice_grad}),
    op_registrar({.name = "pad",
                  .num_inputs = 1,
                  .infer = pad_infer,
                  .kernel = pad_kernel,
                  .summary = "pads by attr paddings [before0, after0, ...] with attr value",
                  .gradient = pad_grad}),
    op_registrar({.name = "tile",
                  .num_inputs = 1,
                  .infer = tile_infer,
                  .kernel = tile_kernel,
                  .summary = "repeats along each dim by attr multiples",
                  .gradient = tile_grad}),
};

}  // namespace

output concat(const std::vector<output>& xs, int64_t axis, const std::string& name) {
  if (xs.empty()) fail("concat", "needs at least one input");
  return make_op("concat", xs, {{"axis", axis}}, name);
}

std::vector<output> split(output x, int64_t num_splits, int64_t axis, const std::string& name) {
  return make_op_outputs("split", {x}, {{"axis", axis}, {"num_splits", num_splits}}, name);
}

std::vector<output> split_sizes(output x, std::vector<int64_t> sizes, int64_t axis,
                                const std::string& name) {
  return make_op_outputs("split", {x}, {{"axis", axis}, {"sizes", std::move(sizes)}}, name);
}

std::vector<output> split_like(output x, const std::vector<output>& likes, int64_t axis,
                               const std::string& name) {
  std::vector<output> ins = {x};
  ins.insert(ins.end(), likes.begin(), likes.end());
  return make_op_outputs("split_like", ins, {{"axis", axis}}, name);
}

output slice(output x, std::vector<int64_t> begin, std::vector<int64_t> size,
             const std::string& name) {
  return make_op("slice", {x}, {{"begin", std::move(begin)}, {"size", std::move(size)}}, name);
}

output pad(output x, std::vector<int64_t> paddings, double value, const std::string& name) {
  return make_op("pad", {x}, {{"paddings", std::move(paddings)}, {"value", value}}, name);
}

output tile(output x, std::vector<int64_t> multiples, const std::string& name) {
  return make_op("tile", {x}, {{"multiples", std::move(multiples)}}, name);
}

}  // namespace actorflow
