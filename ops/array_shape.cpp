// Shape-changing ops that keep the element order: reshape, reshape_like,
// expand_dims, squeeze (never copy: the output shares the input's buffer), and
// transpose.
#include <algorithm>

#include "ops/array.hpp"
#include "ops/array_util.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

using detail::list_to_string;

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + ")";
}

// The output shape of reshaping `in` to `target`. With a fully defined input the
// result is fully defined; with unknown input dims it keeps what can be known.
shape infer_reshape(const shape& in, const std::vector<int64_t>& target, const std::string& op) {
  int unknown_at = -1;
  std::vector<int64_t> others;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (unknown_at >= 0) fail(op, "shape " + dims_text(target) + " has more than one -1");
      unknown_at = static_cast<int>(i);
    } else if (target[i] < 0) {
      fail(op, "shape " + dims_text(target) + " has a negative dim");
    } else {
      others.push_back(target[i]);
    }
  }
  int64_t known = shape(others).num_elements();  // throws on overflow
  std::vector<int64_t> out = target;
  int64_t n = detail::known_product(in);
  if (n >= 0) {
    std::string what = "cannot reshape " + in.to_string() + " (" + std::to_string(n) +
                       " elements) to " + dims_text(target);
    if (unknown_at >= 0) {
      if (known == 0) fail(op, what + ": -1 is ambiguous when the other dims hold 0 elements");
      if (n % known != 0)
        fail(op,
             what + ": " + std::to_string(n) + " is not a multiple of " + std::to_string(known));
      out[static_cast<size_t>(unknown_at)] = n / known;
    } else if (known != n) {
      fail(op, what + " (" + std::to_string(known) + " elements)");
    }
    return shape(out);
  }
  // Some input dims are unknown: the known ones must still divide the target.
  std::vector<int64_t> known_dims;
  for (auto d : in.dims())
    if (d >= 0) known_dims.push_back(d);
  int64_t in_known = shape(known_dims).num_elements();  // throws on overflow
  if (unknown_at >= 0 && known == 0)
    fail(op, "cannot reshape " + in.to_string() + " to " + dims_text(target) +
                 ": -1 is ambiguous when the other dims hold 0 elements");
  if (unknown_at < 0 && in_known > 0 && known % in_known != 0)
    fail(op, "cannot reshape " + in.to_string() + " to " + dims_text(target) + ": " +
                 std::to_string(known) + " elements is not a multiple of " +
                 std::to_string(in_known));
  return shape(out);
}

std::vector<tensor_spec> reshape_infer(const shape_context& c) {
  auto target = c.attr<std::vector<int64_t>>("shape");
  return {{c.inputs[0].type, infer_reshape(c.inputs[0].dims, target, c.op)}};
}

void reshape_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  ctx.set_output(
      0, x.reshaped(infer_reshape(x.dims(), ctx.attr<std::vector<int64_t>>("shape"), ctx.op)));
}

// perm, validated against the rank; empty means reversed.
std::vector<int64_t> get_perm(const attr_map& attrs, const shape& in, const std::string& op) {
  auto perm = get_attr_or<std::vector<int64_t>>(attrs, "perm", op, {});
  int r = in.rank();
  if (perm.empty())
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  std::vector<bool> seen(static_cast<size_t>(r), false);
  bool ok = static_cast<int>(perm.size()) == r;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < r && !seen[static_cast<size_t>(perm[i])];
    if (ok) seen[static_cast<size_t>(perm[i])] = true;
  }
  if (!ok)
    fail(op,
         "perm " + list_to_string(perm) + " is not a permutation of the dims of " + in.to_string());
  return perm;
}

std::vector<tensor_spec> transpose_infer(const shape_context& c) {
  auto& in = c.inputs[0];
  auto perm = get_perm(c.attrs, in.dims, c.op);
  std::vector<int64_t> out;
  for (auto p : perm) out.push_back(in.dims[static_cast<int>(p)]);
  return {{in.type, shape(out)}};
}

void transpose_kernel(kernel_context& ctx) {
  const tensor& x = ctx.input(0);
  auto perm = get_perm(ctx.attrs, x.dims(), ctx.op);
  const auto& in = x.dims().dims();
  std::vector<int64_t> out_dims, src_strides;
  auto xs = detail::dense_strides(in);
  // When the dims larger than 1 keep their order, the bytes do not move.
  bool in_order = true;
  int64_t last = -1;
  for (auto p : perm) {
    auto k = static_cast<size_t>(p);
    out_dims.push_back(in[k]);
    src_strides.push_back(xs[k]);
    if (in[k] != 1) {
      in_order = in_order && p > last;
      last = p;
    }
  }
  if (in_order) return ctx.set_output(0, x.reshaped(shape(out_dims)));
  tensor& out = ctx.allocate_output(0, x.type(), shape(out_dims));
  detail::strided_copy(dtype_size(x.type()), x.raw_data(), src_strides, out.raw_mutable_data(),
                       detail::dense_strides(out_dims), out_dims);
}

shape expand_dims_shape(const shape& in, const attr_map& attrs, const std::string& op) {
  int axis = normalize_axis(get_attr<int64_t>(attrs, "axis", op), in.rank() + 1, op);
  auto d = in.dims();
  d.insert(d.begin() + axis, 1);
  return shape(d);
}

// Which dims squeeze removes: the named axes (each must be 1, or unknown at build
// time), or every size-1 dim when none are named.
std::vector<bool> squeezed_dims(const shape& in, const attr_map& attrs, const std::string& op) {
  auto axes = get_attr_or<std::vector<int64_t>>(attrs, "axes", op, {});
  std::vector<bool> drop(static_cast<size_t>(in.rank()), false);
  if (axes.empty()) {
    for (int i = 0; i < in.rank(); ++i) {
      if (in[i] < 0)
        fail(op,
             "cannot tell which dims of " + in.to_string() + " are 1; name the axes to squeeze");
      drop[static_cast<size_t>(i)] = in[i] == 1;
    }
    return drop;
  }
  for (auto a : axes) {
    int k = normalize_axis(a, in.rank(), op);
    if (in[k] >= 0 && in[k] != 1)
      fail(op, "cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(in[k]) +
                   " in " + in.to_string());
    if (drop[static_cast<size_t>(k)])
      fail(op, "duplicate axis " + std::to_string(a) + " in axes " + list_to_string(axes));
    drop[static_cast<size_t>(k)] = true;
  }
  return drop;
}

shape squeeze_shape(const shape& in, const attr_map& attrs, const std::string& op) {
  auto drop = squeezed_dims(in, attrs, op);
  std::vector<int64_t> out;
  for (int i = 0; i < in.rank(); ++i)
    if (!drop[static_cast<size_t>(i)]) out.push_back(in[i]);
  return shape(out);
}

// ---- reshape_like ----------------------------------------------------------

std::string elements_text(const shape& s) {
  int64_t n = detail::known_product(s);
  return s.to_string() + (n >= 0 ? " (" + std::to_string(n) + " elements)" : "");
}

void check_same_count(const shape& from, const shape& to, const std::string& op) {
  int64_t a = detail::known_product(from), b = detail::known_product(to);
  if (a >= 0 && b >= 0 && a != b)
    fail(op, "cannot reshape " + elements_text(from) + " to the shape of " + elements_text(to));
}

std::vector<tensor_spec> reshape_like_infer(const shape_context& c) {
  check_same_count(c.inputs[0].dims, c.inputs[1].dims, c.op);
  return {{c.inputs[0].type, c.inputs[1].dims}};
}

void reshape_like_kernel(kernel_context& ctx) {
  const shape& to = ctx.input(1).dims();
  check_same_count(ctx.input(0).dims(), to, ctx.op);
  ctx.set_output(0, ctx.input(0).reshaped(to));
}

// ---- gradients -------------------------------------------------------------

// Back to the input's shape: fixed when known, else read at run time.
output reshape_back(output dy, const output& x) {
  if (x.dims().is_fully_defined()) return reshape(dy, x.dims().dims());
  return reshape_like(dy, x);
}

void reshape_grad(grad_context& c) { c.input_grads = {reshape_back(c.grad(), c.input(0))}; }

void transpose_grad(grad_context& c) {
  auto perm = get_perm(c.attrs, c.input(0).dims(), c.op);
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = int64_t(i);
  c.input_grads = {transpose(c.grad(), inverse)};
}

void expand_dims_grad(grad_context& c) {
  int axis = normalize_axis(c.attr<int64_t>("axis"), c.input(0).dims().rank() + 1, c.op);
  c.input_grads = {squeeze(c.grad(), {axis})};
}

void squeeze_grad(grad_context& c) {
  auto drop = squeezed_dims(c.input(0).dims(), c.attrs, c.op);
  output dy = c.grad();
  for (int k = 0; k < c.input(0).dims().rank(); ++k)
    if (drop[static_cast<size_t>(k)]) dy = expand_dims(dy, k);
  c.input_grads = {dy};
}

const op_registrar registrations[] = {
    op_registrar({.name = "reshape",
                  .num_inputs = 1,
                  .infer = reshape_infer,
                  .kernel = reshape_kernel,
                  .summary = "the same elements in a new shape (attr shape, one -1 allowed)",
                  .gradient = reshape_grad}),
    op_registrar({.name = "transpose",
                  .num_inputs = 1,
                  .infer = transpose_infer,
                  .kernel = transpose_kernel,
                  .summary = "permutes dims (attr perm; empty reverses)",
                  .gradient = transpose_grad}),
    op_registrar({.name = "expand_dims",
                  .num_inputs = 1,
                  .infer =
                      [](const shape_context& c) {
                        return std::vector<tensor_spec>{
                            {c.inputs[0].type, expand_dims_shape(c.inputs[0].dims, c.attrs, c.op)}};
                      },
                  .kernel =
                      [](kernel_context& ctx) {
                        const tensor& x = ctx.input(0);
                        ctx.set_output(0,
                                       x.reshaped(expand_dims_shape(x.dims(), ctx.attrs, ctx.op)));
                      },
                  .summary = "inserts a size-1 dim at attr axis",
                  .gradient = expand_dims_grad}),
    op_registrar({.name = "squeeze",
                  .num_inputs = 1,
                  .infer =
                      [](const shape_context& c) {
                        return std::vector<tensor_spec>{
                            {c.inputs[0].type, squeeze_shape(c.inputs[0].dims, c.attrs, c.op)}};
                      },
                  .kernel =
                      [](kernel_context& ctx) {
                        const tensor& x = ctx.input(0);
                        ctx.set_output(0, x.reshaped(squeeze_shape(x.dims(), ctx.attrs, ctx.op)));
                      },
                  .summary = "removes size-1 dims (attr axes; empty = all)",
                  .gradient = squeeze_grad}),
    op_registrar(
        {.name = "reshape_like",
         .num_inputs = 2,
         .infer = reshape_like_infer,
         .kernel = reshape_like_kernel,
         .summary = "input 0's elements in the run-time shape of input 1",
         .gradient =
             [](grad_context& c) { c.input_grads = {reshape_back(c.grad(), c.input(0))}; }}),
};

}  // namespace

output reshape(output x, std::vector<int64_t> new_shape, const std::string& name) {
  return make_op("reshape", {x}, {{"shape", std::move(new_shape)}}, name);
}

output transpose(output x, std::vector<int64_t> perm, const std::string& name) {
  attr_map attrs;
  if (!perm.empty()) attrs["perm"] = std::move(perm);
  return make_op("transpose", {x}, std::move(attrs), name);
}

output expand_dims(output x, int64_t axis, const std::string& name) {
  return make_op("expand_dims", {x}, {{"axis", axis}}, name);
}

output squeeze(output x, std::vector<int64_t> axes, const std::string& name) {
  return make_op("squeeze", {x}, {{"axes", std::move(axes)}}, name);
}

output reshape_like(output x, output like, const std::string& name) {
  return make_op("reshape_like", {x, like}, {}, name);
}

}  // namespace actorflow
