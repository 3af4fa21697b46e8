#include "ops/state.hpp"

#include "ops/math.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

std::vector<tensor_spec> spec_from_attrs(const shape_context& c) {
  return {{c.attr<dtype>("dtype"), shape(c.attr<std::vector<int64_t>>("shape"))}};
}

std::vector<tensor_spec> same_as_input0(const shape_context& c) { return {c.inputs[0]}; }

std::vector<tensor_spec> no_outputs(const shape_context&) { return {}; }

// The placeholder and variable kernels never run: the runtime feeds
// placeholders and asks variable actors for variables. Reaching one is a bug.
void runtime_only(kernel_context& ctx) {
  ctx.fail("is served by the runtime, not by a kernel (node '" + ctx.node_name + "')");
}

// Update ops must agree with the variable on dtype and shape.
std::vector<tensor_spec> update_spec(const shape_context& c) {
  auto& var = c.inputs[0];
  auto& value = c.inputs[1];
  if (var.type != value.type)
    c.fail("variable is " + var.to_string() + " but the value is " + value.to_string());
  if (!var.dims.compatible_with(value.dims))
    c.fail("variable shape " + var.dims.to_string() + " differs from value shape " +
           value.dims.to_string());
  return {var};
}

// assign_moving_average: an update of a float variable, decay in [0, 1].
std::vector<tensor_spec> moving_average_spec(const shape_context& c) {
  if (!is_floating(c.inputs[0].type))
    c.fail(std::string("the variable must be float32 or float64, got ") +
           dtype_name(c.inputs[0].type));
  const double decay = c.attr<double>("decay");
  if (!(decay >= 0 && decay <= 1)) c.fail("decay must be in [0, 1], got " + std::to_string(decay));
  return update_spec(c);
}

void check_update_value(const variable_state& v, const tensor& value, kernel_context& ctx) {
  if (value.type() != v.value.type() || value.dims() != v.value.dims())
    ctx.fail("variable '" + ctx.node_name + "' is " +
             tensor_spec{v.value.type(), v.value.dims()}.to_string() + ", value is " +
             tensor_spec{value.type(), value.dims()}.to_string());
}

void require_initialized(const variable_state& v, kernel_context& ctx) {
  if (!v.initialized())
    ctx.fail(error_code::failed_precondition,
             "variable is uninitialized (node '" + ctx.node_name + "')");
}

// In-place update; mutable_value() copies first if a reader holds the buffer.
template <class Op>
void update_in_place(variable_state& v, kernel_context& ctx, Op op) {
  require_initialized(v, ctx);
  const tensor& delta = ctx.inputs[0];
  check_update_value(v, delta, ctx);
  visit_numeric(v.value.type(), ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    T* dst = v.mutable_value().mutable_data<T>();
    const T* src = delta.data<T>();
    parallel_for(v.value.num_elements(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = op(dst[i], src[i]);
    });
  });
  ctx.set_output(0, v.value);
}

const op_registrar registrations[] = {
    op_registrar({.name = "placeholder",
                  .role = op_role::placeholder,
                  .num_inputs = 0,
                  .infer = spec_from_attrs,
                  .kernel = runtime_only,
                  .summary = "a value fed at run time",
                  .not_differentiable = true}),
    op_registrar(
        {.name = "constant",
         .role = op_role::constant,
         .num_inputs = 0,
         .infer =
             [](const shape_context& c) {
               auto t = c.attr<tensor>("value");
               if (!t.valid()) c.fail("constant without a value");
               return std::vector<tensor_spec>{{t.type(), t.dims()}};
             },
         .kernel = [](kernel_context& ctx) { ctx.set_output(0, ctx.attr<tensor>("value")); },
         .summary = "a fixed tensor",
         .not_differentiable = true}),
    op_registrar({.name = "identity",
                  .num_inputs = 1,
                  .infer = same_as_input0,
                  .kernel = [](kernel_context& ctx) { ctx.set_output(0, ctx.inputs[0]); },
                  .summary = "passes its input through",
                  .gradient = [](grad_context& c) { c.input_grads = {c.grad()}; }}),
    op_registrar({.name = "stop_gradient",
                  .num_inputs = 1,
                  .infer = same_as_input0,
                  .kernel = [](kernel_context& ctx) { ctx.set_output(0, ctx.inputs[0]); },
                  .summary = "passes its input through; no gradient flows back",
                  .gradient = [](grad_context&) {}}),
    op_registrar({.name = "no_op",
                  .role = op_role::group,
                  .num_inputs = 0,
                  .infer = no_outputs,
                  .kernel = [](kernel_context&) {},
                  .summary = "does nothing; groups control dependencies",
                  .not_differentiable = true}),
    op_registrar({.name = "variable",
                  .role = op_role::variable,
                  .num_inputs = 0,
                  .infer = spec_from_attrs,
                  .kernel = runtime_only,
                  .stateful = true,
                  .summary = "reads a variable's current value",
                  .not_differentiable = true}),
    op_registrar({.name = "read_variable",
                  .num_inputs = 1,
                  .infer = same_as_input0,
                  .update =
                      [](variable_state& v, kernel_context& ctx) {
                        require_initialized(v, ctx);
                        ctx.set_output(0, v.value);
                      },
                  .stateful = true,
                  .summary = "reads a variable when its control dependencies are done",
                  // A read is the variable's value: its gradient is the variable's.
                  .gradient = [](grad_context& c) { c.input_grads = {c.grad()}; }}),
    op_registrar({.name = "is_variable_initialized",
                  .num_inputs = 1,
                  .infer =
                      [](const shape_context&) {
                        return std::vector<tensor_spec>{{dtype::boolean, shape{}}};
                      },
                  .update =
                      [](variable_state& v, kernel_context& ctx) {
                        ctx.set_output(0, tensor::scalar<bool>(v.initialized()));
                      },
                  .stateful = true,
                  .summary = "whether a variable has been set (initialized, assigned or restored)",
                  .not_differentiable = true}),
    op_registrar({.name = "assign",
                  .num_inputs = 2,
                  .infer = update_spec,
                  .update =
                      [](variable_state& v, kernel_context& ctx) {
                        const tensor& value = ctx.inputs[0];
                        if (v.initialized()) check_update_value(v, value, ctx);
                        // Sharing the incoming buffer is safe: tensors in messages are
                        // immutable, and a later in-place update copies first.
                        v.value = value;
                        ctx.set_output(0, v.value);
                      },
                  .stateful = true,
                  .summary = "sets a variable",
                  .not_differentiable = true}),
    op_registrar({.name = "assign_add",
                  .num_inputs = 2,
                  .infer = update_spec,
                  .update =
                      [](variable_state& v, kernel_context& ctx) {
                        update_in_place(v, ctx, [](auto a, auto b) { return a + b; });
                      },
                  .stateful = true,
                  .summary = "adds to a variable in place",
                  .not_differentiable = true}),
    op_registrar({.name = "assign_sub",
                  .num_inputs = 2,
                  .infer = update_spec,
                  .update =
                      [](variable_state& v, kernel_context& ctx) {
                        update_in_place(v, ctx, [](auto a, auto b) { return a - b; });
                      },
                  .stateful = true,
                  .summary = "subtracts from a variable in place",
                  .not_differentiable = true}),
    op_registrar({.name = "assign_moving_average",
                  .num_inputs = 2,
                  .infer = moving_average_spec,
                  .update =
                      [](variable_state& v, kernel_context& ctx) {
                        const double decay = ctx.attr<double>("decay");
                        update_in_place(v, ctx, [decay](auto a, auto b) {
                          using T = decltype(a);
                          return T(a * T(decay) + b * T(1 - decay));
                        });
                      },
                  .stateful = true,
                  .summary = "v = v * decay + value * (1 - decay), in place",
                  .not_differentiable = true}),
};

}  // namespace

output placeholder(graph& g, dtype type, shape dims, const std::string& name) {
  auto& n = g.add_node("placeholder", {}, {{"dtype", type}, {"shape", dims.dims()}},
                       name.empty() ? "placeholder" : name);
  return output(&g, {n.id, 0});
}

output constant(graph& g, tensor value, const std::string& name) {
  auto& n =
      g.add_node("constant", {}, {{"value", std::move(value)}}, name.empty() ? "constant" : name);
  return output(&g, {n.id, 0});
}

output identity(output x, const std::string& name) { return make_op("identity", {x}, {}, name); }

output stop_gradient(output x, const std::string& name) {
  return make_op("stop_gradient", {x}, {}, name);
}

operation no_op(graph& g, const std::string& name) {
  return operation(&g, g.add_node("no_op", {}, {}, name.empty() ? "no_op" : name).id);
}

operation group(graph& g, const std::vector<operation>& ops, const std::string& name) {
  auto deps = g.control_dependencies(ops);
  return no_op(g, name.empty() ? "group" : name);
}

namespace {

variable add_variable(graph& g, dtype type, shape dims, const std::string& name, attr_map attrs) {
  if (!dims.is_fully_defined())
    fail("variable", "shape must be fully defined, got " + dims.to_string());
  attrs["dtype"] = type;
  attrs["shape"] = dims.dims();
  auto& n = g.add_node("variable", {}, std::move(attrs), name.empty() ? "variable" : name);
  return variable(output(&g, {n.id, 0}), operation());
}

}  // namespace

variable make_variable(graph& g, dtype type, shape dims, const std::string& name) {
  return add_variable(g, type, dims, name, {});
}

variable make_variable(output initial, const std::string& name, attr_map extra) {
  graph& g = initial.owner();
  variable v = add_variable(g, initial.type(), initial.dims(), name, std::move(extra));
  auto init = assign(v, initial, v.name() + "/init");
  return variable(v.value(), operation(&g, init.ref().node));
}

variable make_variable(output initial, const std::string& name) {
  return make_variable(initial, name, attr_map{});
}

output variable::read(const std::string& name) const {
  return make_op("read_variable", {value_}, {}, name);
}

output assign(const variable& v, output value, const std::string& name) {
  return make_op("assign", {v.value(), value}, {}, name);
}

output assign_add(const variable& v, output delta, const std::string& name) {
  return make_op("assign_add", {v.value(), delta}, {}, name);
}

output assign_sub(const variable& v, output delta, const std::string& name) {
  return make_op("assign_sub", {v.value(), delta}, {}, name);
}

output assign_moving_average(const variable& v, output value, double decay,
                             const std::string& name) {
  return make_op("assign_moving_average", {v.value(), value}, {{"decay", decay}}, name);
}

output is_variable_initialized(const variable& v, const std::string& name) {
  return make_op("is_variable_initialized", {v.value()}, {},
                 name.empty() ? v.name() + "/is_initialized" : name);
}

namespace {

// The nodes global_variables_initializer groups: each variable's "<name>/init".
std::vector<int> initializer_nodes(const graph& g) {
  std::vector<int> inits;
  for (auto& n : g.nodes())
    if (n.op == "assign" && n.name.size() > 5 && n.name.compare(n.name.size() - 5, 5, "/init") == 0)
      inits.push_back(n.id);
  return inits;
}

}  // namespace

output global_variables_initialized(graph& g, const std::string& name) {
  std::vector<int> variables;  // collected first: adding nodes may move g.nodes()
  for (int init : initializer_nodes(g)) variables.push_back(g.nodes()[size_t(init)].inputs[0].node);
  output all = scalar(g, true, name + "/none");
  for (int id : variables) {
    variable v(output(&g, {id, 0}), operation());
    all = logical_and(all, is_variable_initialized(v), name + "/" + v.name());
  }
  return identity(all, name);
}

std::vector<variable_initializer> variable_initializers(graph& g, const std::string& name) {
  std::vector<int> inits =
      initializer_nodes(g);  // collected first: adding nodes may move g.nodes()
  std::vector<variable_initializer> out;
  for (int init : inits) {
    variable v(output(&g, {g.nodes()[size_t(init)].inputs[0].node, 0}), operation());
    out.push_back(
        {v.name(), is_variable_initialized(v, name + "/" + v.name()), operation(&g, init)});
  }
  return out;
}

operation global_variables_initializer(graph& g, const std::string& name) {
  std::vector<operation> inits;
  for (int id : initializer_nodes(g)) inits.push_back(operation(&g, id));
  return group(g, inits, name);
}

}  // namespace actorflow
