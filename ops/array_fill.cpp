// Ops that make tensors from shapes: fill, zeros_like, ones_like, and the
// shape queries shape and size.
#include "ops/array.hpp"
#include "ops/array_util.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

shape fill_shape(const attr_map& attrs, const std::string& op) {
  auto dims = get_attr<std::vector<int64_t>>(attrs, "shape", op);
  for (auto d : dims)
    if (d < 0)
      fail(op, "shape " + detail::list_to_string(dims) + " must be fully defined and not negative");
  shape s(dims);
  s.num_elements();  // throws on overflow
  return s;
}

std::vector<tensor_spec> fill_infer(const shape_context& c) {
  dtype type = c.attr_or<dtype>("dtype", dtype::float32);
  if (type != dtype::bfloat16)  // any double converts to bfloat16 (inf beyond its range)
    visit_dtype(type, [&](auto tag) {
      detail::cast_value<decltype(tag)>(c.attr<double>("value"), c.op, "value");
    });
  return {{type, fill_shape(c.attrs, c.op)}};
}

void fill_kernel(kernel_context& ctx) {
  tensor& out = ctx.allocate_output(0, ctx.attr_or<dtype>("dtype", dtype::float32),
                                    fill_shape(ctx.attrs, ctx.op));
  detail::fill_value(out, ctx.attr<double>("value"), ctx.op);
}

std::vector<tensor_spec> same_as_input0(const shape_context& c) { return {c.inputs[0]}; }

void fill_like(kernel_context& ctx, double value) {
  const tensor& x = ctx.input(0);
  detail::fill_value(ctx.allocate_output(0, x.type(), x.dims()), value, ctx.op);
}

const op_registrar registrations[] = {
    op_registrar({.name = "fill",
                  .num_inputs = 0,
                  .infer = fill_infer,
                  .kernel = fill_kernel,
                  .summary = "a tensor of attr shape and dtype filled with attr value",
                  .not_differentiable = true}),
    op_registrar({.name = "zeros_like",
                  .num_inputs = 1,
                  .infer = same_as_input0,
                  .kernel = [](kernel_context& ctx) { fill_like(ctx, 0); },
                  .summary = "zeros of the input's dtype and shape",
                  // The value does not depend on the input's values: no gradient flows.
                  .gradient = [](grad_context&) {}}),
    op_registrar({.name = "ones_like",
                  .num_inputs = 1,
                  .infer = same_as_input0,
                  .kernel = [](kernel_context& ctx) { fill_like(ctx, 1); },
                  .summary = "ones of the input's dtype and shape",
                  .gradient = [](grad_context&) {}}),
    op_registrar(
        {.name = "shape",
         .num_inputs = 1,
         .infer =
             [](const shape_context& c) {
               // At build time only the rank is sure to be known.
               return std::vector<tensor_spec>{{dtype::int64, shape{c.inputs[0].dims.rank()}}};
             },
         .kernel =
             [](kernel_context& ctx) {
               ctx.set_output(0, tensor::from_vector<int64_t>(ctx.input(0).dims().dims()));
             },
         .summary = "the input's shape as a 1-D int64 tensor",
         .not_differentiable = true}),
    op_registrar({.name = "size",
                  .num_inputs = 1,
                  .infer =
                      [](const shape_context& c) {
                        return std::vector<tensor_spec>{{dtype::int64, shape{}}};
                      },
                  .kernel =
                      [](kernel_context& ctx) {
                        ctx.set_output(0, tensor::scalar<int64_t>(ctx.input(0).num_elements()));
                      },
                  .summary = "the input's element count as an int64 scalar",
                  .not_differentiable = true}),
};

}  // namespace

output fill(graph& g, shape dims, double value, dtype type, const std::string& name) {
  auto& n =
      g.add_node("fill", {}, {{"shape", dims.dims()}, {"value", value}, {"dtype", type}}, name);
  return output(&g, {n.id, 0});
}

output zeros_like(output x, const std::string& name) {
  return make_op("zeros_like", {x}, {}, name);
}

output ones_like(output x, const std::string& name) { return make_op("ones_like", {x}, {}, name); }

output shape_of(output x, const std::string& name) { return make_op("shape", {x}, {}, name); }

output size(output x, const std::string& name) { return make_op("size", {x}, {}, name); }

}  // namespace actorflow
