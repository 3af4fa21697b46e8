#include "ops/accumulator.hpp"

#include "ops/array_util.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

attr_map attrs_of(const tensor_spec& spec, bool sparse = false) {
  attr_map attrs{{"dtype", spec.type}, {"shape", spec.dims.dims()}};
  if (sparse) attrs["sparse"] = true;  // absent on dense ones, as in older graphs
  return attrs;
}

// The accumulator reference: a scalar that is never computed (the session
// serves accumulator nodes with an actor; a fetch reaches this kernel and fails).
const tensor_spec handle_spec{dtype::int32, shape{}};

void accumulator_reference_only(kernel_context& ctx) {
  ctx.fail("node '" + ctx.node_name +
           "' is an accumulator reference, not a value: run accumulator ops on it "
           "(accumulator_take_gradient, accumulator_num_accumulated)");
}

// Accumulator ops run in the accumulator's actor, never as kernels.
void served_by_accumulator_actor(kernel_context& ctx) {
  ctx.fail("node '" + ctx.node_name + "' is served by its accumulator's actor, not by a kernel");
}

void check_gradient(const tensor_spec& spec, const tensor_spec& grad, const std::string& op,
                    const std::string& prefix) {
  if (grad.type != spec.type || !grad.dims.compatible_with(spec.dims))
    fail(op, prefix + "gradient is " + grad.to_string() + ", the accumulator holds " +
                 spec.to_string());
}

// Steps and counts are scalars of one dtype; `what` names the input in errors.
void check_scalar(const tensor_spec& given, dtype type, const std::string& what,
                  const std::string& op) {
  if (given.type != type || !given.dims.compatible_with(shape{}))
    fail(op, what + " must be a " + dtype_name(type) + " scalar, got " + given.to_string());
}

std::vector<tensor_spec> accumulator_spec(const shape_context& c) {
  accumulator_spec_of(c.attrs, c.op);  // validates
  return {handle_spec};
}

// Dense gradients go to dense accumulators, rows to sparse ones.
void check_kind(const attr_map& attrs, bool sparse_op, const std::string& op,
                const std::string& who = "the accumulator") {
  bool sparse = is_sparse_accumulator(attrs);
  if (sparse && !sparse_op)
    fail(op, who + " holds row gradients: use the sparse_accumulator_ ops on it");
  if (!sparse && sparse_op)
    fail(op, who + " holds dense gradients: use the accumulator_ ops on it");
}

std::vector<tensor_spec> apply_spec(const shape_context& c) {
  check_kind(c.attrs, false, c.op);
  check_scalar(c.inputs[1], dtype::int64, "local_step", c.op);
  check_gradient(accumulator_spec_of(c.attrs, c.op), c.inputs[2], c.op, "");
  return {};
}

std::vector<tensor_spec> take_spec(const shape_context& c) {
  check_kind(c.attrs, false, c.op);
  check_scalar(c.inputs[1], dtype::int32, "num_required", c.op);
  return {accumulator_spec_of(c.attrs, c.op)};
}

std::vector<tensor_spec> sparse_apply_spec(const shape_context& c) {
  check_kind(c.attrs, true, c.op);
  check_scalar(c.inputs[1], dtype::int64, "local_step", c.op);
  auto spec = accumulator_spec_of(c.attrs, c.op);
  auto& rows = c.inputs[2];
  auto& indices = c.inputs[3];
  detail::check_index_type(indices.type, c.op);
  check_gradient({spec.type, detail::gathered_rows_shape(indices.dims, spec.dims)}, rows, c.op,
                 "rows: ");
  return {};
}

std::vector<tensor_spec> sparse_take_spec(const shape_context& c) {
  check_kind(c.attrs, true, c.op);
  check_scalar(c.inputs[1], dtype::int32, "num_required", c.op);
  auto spec = accumulator_spec_of(c.attrs, c.op);
  return {{spec.type, detail::gathered_rows_shape(shape{-1}, spec.dims)},
          {dtype::int64, shape{-1}}};
}

std::vector<tensor_spec> set_step_spec(const shape_context& c) {
  check_scalar(c.inputs[1], dtype::int64, "new_global_step", c.op);
  return {};
}

// What every op on an accumulator shares in its definition.
op_def accumulator_op(std::string name, int num_inputs, shape_fn infer, std::string summary,
                      bool may_wait = false) {
  return {.name = std::move(name),
          .num_inputs = num_inputs,
          .infer = std::move(infer),
          .kernel = served_by_accumulator_actor,
          .resource = "conditional_accumulator",
          .may_wait = may_wait,
          .stateful = true,
          .summary = std::move(summary),
          .not_differentiable = true};
}

const op_registrar registrations[] = {
    op_registrar({.name = "conditional_accumulator",
                  .role = op_role::resource,
                  .num_inputs = 0,
                  .infer = accumulator_spec,
                  .kernel = accumulator_reference_only,
                  .stateful = true,
                  .summary = "accumulates gradients of the current step, served by an actor",
                  .not_differentiable = true}),
    op_registrar(accumulator_op("accumulator_apply_gradient", 3, apply_spec,
                                "adds a gradient to an accumulator unless it is stale")),
    op_registrar(accumulator_op("accumulator_take_gradient", 2, take_spec,
                                "waits for enough gradients, returns their average, "
                                "and starts the next step",
                                /*may_wait=*/true)),
    op_registrar(accumulator_op("sparse_accumulator_apply_gradient", 4, sparse_apply_spec,
                                "adds gradient rows to a sparse accumulator unless stale")),
    op_registrar(accumulator_op("sparse_accumulator_take_gradient", 2, sparse_take_spec,
                                "waits for enough gradients, returns the average's rows and "
                                "their indices, and starts the next step",
                                /*may_wait=*/true)),
    op_registrar(accumulator_op("accumulator_set_global_step", 2, set_step_spec,
                                "raises an accumulator's global step")),
    op_registrar(accumulator_op(
        "accumulator_num_accumulated", 1,
        [](const shape_context&) { return std::vector<tensor_spec>{handle_spec}; },
        "the number of gradients an accumulator holds")),
};

const node& accumulator_node(const output& acc, const std::string& op) {
  auto& n = acc.node();
  if (n.op != "conditional_accumulator")
    fail(op, "'" + acc.name() + "' is a " + n.op + ", not a conditional accumulator");
  return n;
}

// Nodes of accumulator ops carry the accumulator's spec, so that their shape
// functions can check and infer without seeing the accumulator node.
attr_map spec_attrs_of(const output& acc, const std::string& op) {
  auto& attrs = accumulator_node(acc, op).attrs;
  return attrs_of(accumulator_spec_of(attrs, op), is_sparse_accumulator(attrs));
}

operation make_target(const std::string& op, std::vector<output> inputs, attr_map attrs,
                      const std::string& name) {
  graph& g = inputs[0].owner();
  auto& n = g.add_node(op, std::move(inputs), std::move(attrs), name);
  return operation(&g, n.id);
}

}  // namespace

tensor_spec accumulator_spec_of(const attr_map& attrs, const std::string& op) {
  tensor_spec spec{get_attr<dtype>(attrs, "dtype", op),
                   shape(get_attr<std::vector<int64_t>>(attrs, "shape", op))};
  if (spec.type == dtype::bfloat16) fail_no_bfloat16_kernel(op);
  if (!is_floating(spec.type))
    fail(op, std::string("an accumulator holds float32 or float64 gradients, got ") +
                 dtype_name(spec.type));
  if (is_sparse_accumulator(attrs) && (spec.dims.rank() < 1 || !spec.dims.is_fully_defined()))
    fail(op, "a sparse accumulator needs the variable's full shape, of rank >= 1; got " +
                 spec.dims.to_string());
  return spec;
}

bool is_sparse_accumulator(const attr_map& attrs) {
  return get_attr_or<bool>(attrs, "sparse", "conditional_accumulator", false);
}

void check_accumulator_gradient(const tensor_spec& spec, const tensor_spec& grad,
                                const std::string& accumulator_name) {
  check_gradient(spec, grad, "accumulator '" + accumulator_name + "'", "");
}

output conditional_accumulator(graph& g, dtype type, const shape& dims, const std::string& name) {
  tensor_spec spec{type, dims};
  accumulator_spec_of(attrs_of(spec), "conditional_accumulator");  // validates at once
  auto& n = g.add_node("conditional_accumulator", {}, attrs_of(spec),
                       name.empty() ? "conditional_accumulator" : name);
  return output(&g, {n.id, 0});
}

output sparse_conditional_accumulator(graph& g, dtype type, const shape& dims,
                                      const std::string& name) {
  tensor_spec spec{type, dims};
  auto attrs = attrs_of(spec, true);
  accumulator_spec_of(attrs, "sparse_conditional_accumulator");  // validates at once
  auto& n = g.add_node("conditional_accumulator", {}, std::move(attrs),
                       name.empty() ? "sparse_conditional_accumulator" : name);
  return output(&g, {n.id, 0});
}

operation accumulator_apply_gradient(output acc, output local_step, output grad,
                                     const std::string& name) {
  const std::string op = "accumulator_apply_gradient";
  // Checked here too, where the error can name the accumulator; the shape
  // function checks graphs that are loaded rather than built.
  auto attrs = spec_attrs_of(acc, op);
  check_kind(attrs, false, op, "accumulator '" + acc.name() + "'");
  check_gradient(accumulator_spec_of(attrs, op), grad.spec(), op,
                 "accumulator '" + acc.name() + "': ");
  return make_target(op, {acc, local_step, grad}, std::move(attrs), name);
}

operation sparse_accumulator_apply_gradient(output acc, output local_step, output rows,
                                            output indices, const std::string& name) {
  const std::string op = "sparse_accumulator_apply_gradient";
  auto attrs = spec_attrs_of(acc, op);
  check_kind(attrs, true, op, "accumulator '" + acc.name() + "'");
  return make_target(op, {acc, local_step, rows, indices}, std::move(attrs), name);
}

accumulated_rows sparse_accumulator_take_gradient(output acc, output num_required,
                                                  const std::string& name) {
  const std::string op = "sparse_accumulator_take_gradient";
  auto outs = make_op_outputs(op, {acc, num_required}, spec_attrs_of(acc, op), name);
  return {outs[0], outs[1]};
}

output accumulator_take_gradient(output acc, output num_required, const std::string& name) {
  const std::string op = "accumulator_take_gradient";
  return make_op(op, {acc, num_required}, spec_attrs_of(acc, op), name);
}

operation accumulator_set_global_step(output acc, output new_step, const std::string& name) {
  const std::string op = "accumulator_set_global_step";
  return make_target(op, {acc, new_step}, spec_attrs_of(acc, op), name);
}

output accumulator_num_accumulated(output acc, const std::string& name) {
  const std::string op = "accumulator_num_accumulated";
  return make_op(op, {acc}, spec_attrs_of(acc, op), name);
}

}  // namespace actorflow
