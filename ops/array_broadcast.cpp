// Broadcasting: broadcast_to (a shape fixed at build time) and broadcast_like
// (the shape of another tensor, read at run time, so -1 batch dims work).
#include "ops/array.hpp"
#include "ops/array_util.hpp"
#include "ops/op_util.hpp"
#include "ops/reduce.hpp"

namespace actorflow {

namespace {

// NumPy rules, one way: from's dims align right with to's; each is 1 or equal.
// Unknown dims pass at build time and are checked again at run time.
void check_broadcastable(const shape& from, const shape& to, const std::string& op) {
  bool ok = from.rank() <= to.rank();
  int lead = to.rank() - from.rank();
  for (int k = 0; ok && k < from.rank(); ++k) {
    int64_t f = from[k], t = to[lead + k];
    ok = f < 0 || t < 0 || f == 1 || f == t;
  }
  if (!ok) fail(op, "cannot broadcast " + from.to_string() + " to " + to.to_string());
}

std::vector<tensor_spec> broadcast_to_infer(const shape_context& c) {
  auto dims = c.attr<std::vector<int64_t>>("shape");
  for (auto d : dims)
    if (d < 0)
      c.fail("shape " + detail::list_to_string(dims) +
             " must be fully defined (broadcast_like takes a shape known at run time)");
  shape to(dims);
  check_broadcastable(c.inputs[0].dims, to, c.op);
  return {{c.inputs[0].type, to}};
}

void broadcast_to_kernel(kernel_context& ctx) {
  shape to(ctx.attr<std::vector<int64_t>>("shape"));
  check_broadcastable(ctx.input(0).dims(), to, ctx.op);
  ctx.set_output(0, detail::broadcast_tensor(ctx.input(0), to));
}

std::vector<tensor_spec> broadcast_like_infer(const shape_context& c) {
  const shape& from = c.inputs[0].dims;
  shape to = c.inputs[1].dims;
  check_broadcastable(from, to, c.op);
  // An unknown target dim facing a known non-1 input dim must equal it.
  int lead = to.rank() - from.rank();
  for (int k = 0; k < from.rank(); ++k)
    if (to[lead + k] < 0 && from[k] >= 0 && from[k] != 1) to[lead + k] = from[k];
  return {{c.inputs[0].type, to}};
}

void broadcast_like_kernel(kernel_context& ctx) {
  const shape& to = ctx.input(1).dims();
  check_broadcastable(ctx.input(0).dims(), to, ctx.op);
  ctx.set_output(0, detail::broadcast_tensor(ctx.input(0), to));
}

// Broadcasting copies: the gradient sums the copies back to the input's shape.
void broadcast_grad(grad_context& c) { c.input_grads = {sum_to_shape_of(c.grad(), c.input(0))}; }

const op_registrar registrations[] = {
    op_registrar({.name = "broadcast_to",
                  .num_inputs = 1,
                  .infer = broadcast_to_infer,
                  .kernel = broadcast_to_kernel,
                  .summary = "broadcasts to attr shape (NumPy rules)",
                  .gradient = broadcast_grad}),
    op_registrar({.name = "broadcast_like",
                  .num_inputs = 2,
                  .infer = broadcast_like_infer,
                  .kernel = broadcast_like_kernel,
                  .summary = "broadcasts input 0 to the run-time shape of input 1",
                  .gradient = broadcast_grad}),
};

}  // namespace

output broadcast_to(output x, shape dims, const std::string& name) {
  return make_op("broadcast_to", {x}, {{"shape", dims.dims()}}, name);
}

output broadcast_like(output x, output like, const std::string& name) {
  return make_op("broadcast_like", {x, like}, {}, name);
}

}  // namespace actorflow
