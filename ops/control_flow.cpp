#include "ops/control_flow.hpp"

#include <cstdint>

#include "ops/op_util.hpp"
#include "ops/state.hpp"

namespace actorflow {

namespace {

// The runtime runs switch and merge itself (actors/run/nodes/): their
// outputs can be dead, which a kernel cannot express.
void runtime_only(kernel_context& ctx) {
  ctx.fail("is run by the runtime, not by a kernel (node '" + ctx.node_name + "')");
}

void check_predicate(const tensor_spec& pred, const std::string& where) {
  if (pred.type != dtype::boolean || !pred.dims.compatible_with(shape{}))
    fail(where, "the predicate must be a scalar bool, not " + pred.to_string());
}

std::vector<tensor_spec> switch_spec(const shape_context& c) {
  check_predicate(c.inputs[1], c.op);
  return {c.inputs[0], c.inputs[0]};
}

// One spec for values that may come from any input: dims the inputs
// disagree on are unknown.
tensor_spec common_spec(const std::vector<tensor_spec>& specs, const std::string& where) {
  tensor_spec out = specs[0];
  for (size_t i = 1; i < specs.size(); ++i) {
    auto& s = specs[i];
    if (s.type != out.type || s.dims.rank() != out.dims.rank())
      fail(where, "input " + std::to_string(i) + " is " + s.to_string() + " but input 0 is " +
                      specs[0].to_string());
    for (int d = 0; d < out.dims.rank(); ++d)
      if (out.dims[d] != s.dims[d]) out.dims[d] = shape::unknown;
  }
  return out;
}

// A loop merge (attribute "frame") takes its spec from the loop variable's
// shape invariant ("dims"), which the body's values must fit too.
std::vector<tensor_spec> merge_spec(const shape_context& c) {
  tensor_spec out = common_spec(c.inputs, c.op);
  if (auto dims = c.attrs.find("dims"); dims != c.attrs.end()) {
    shape invariant(std::get<std::vector<int64_t>>(dims->second));
    if (!out.dims.compatible_with(invariant) || out.dims.rank() != invariant.rank())
      c.fail("the loop variable " + out.to_string() + " does not fit its shape invariant " +
             invariant.to_string());
    out.dims = invariant;
  }
  return {out, {dtype::int32, shape{}}};
}

std::vector<tensor_spec> same_spec(const shape_context& c) { return {c.inputs[0]}; }

// An exit's second output: how many iterations its loop ran (the gradient
// loop runs as many).
std::vector<tensor_spec> exit_spec(const shape_context& c) {
  return {c.inputs[0], {dtype::int64, shape{}}};
}

// enter, exit and next_iteration take part in a loop's gradient, which the
// gradient driver builds for the loop as a whole (core/gradients.cpp).
void loop_part_gradient(grad_context& c) {
  fail("gradients", "node '" + c.node_name + "' (" + c.op +
                        ") belongs to a loop whose gradient is built as a whole; it cannot be "
                        "differentiated on its own");
}

// The gradient of data reaches the switch along the taken output; the
// driver fills the untaken one with zeros of the same liveness, so exactly
// one of the two is live and the merge passes it on.
void switch_gradient(grad_context& c) {
  c.input_grads.resize(2);
  c.input_grads[0] = merge({c.grads[0], c.grads[1]}, "switch_grad")[0];
}

// The gradient of a cond's merge goes back into the branch that was taken:
// a switch on the cond's predicate (kept in the merge's "pred" attribute).
void merge_gradient(grad_context& c) {
  auto pred_name = c.attr_or<std::string>("pred", "");
  if (pred_name.empty() || c.inputs.size() != 2)
    fail("gradients", "merge '" + c.node_name + "' is not the merge of a cond; it has no gradient");
  auto pred = c.g.output_by_name(pred_name);
  auto branches = switch_op(c.grad(0), pred, "merge_grad");
  c.input_grads = {branches[0], branches[1]};
}

// A loop's saved forward value, read back by its gradient loop: the spec
// is the forward value's, kept in attributes.
std::vector<tensor_spec> history_read_spec(const shape_context& c) {
  for (auto& in : c.inputs)
    if (in.type != dtype::int64 || !in.dims.compatible_with(shape{}))
      c.fail("the iteration indices must be int64 scalars, not " + in.to_string());
  return {{c.attr<dtype>("type"), shape(c.attr<std::vector<int64_t>>("dims"))}};
}

std::vector<tensor_spec> no_outputs(const shape_context&) { return {}; }

const op_registrar registrations[] = {
    op_registrar({.name = "history_push",
                  .role = op_role::history_push,
                  .num_inputs = 1,
                  .infer = no_outputs,
                  .kernel = runtime_only,
                  .stateful = true,
                  .summary = "saves its input per loop iteration for a gradient loop",
                  .not_differentiable = true}),
    op_registrar({.name = "history_read",
                  .role = op_role::history_read,
                  .num_inputs = -1,
                  .min_inputs = 1,
                  .infer = history_read_spec,
                  .kernel = runtime_only,
                  .stateful = true,
                  .summary = "a saved forward value of the iteration its indices name",
                  .not_differentiable = true}),
    op_registrar({.name = "switch",
                  .role = op_role::switch_value,
                  .num_inputs = 2,
                  .infer = switch_spec,
                  .kernel = runtime_only,
                  .summary = "data to output 1 if pred, else to output 0; dead to the other",
                  .gradient = switch_gradient}),
    op_registrar({.name = "enter",
                  .role = op_role::enter_frame,
                  .num_inputs = 1,
                  .infer = same_spec,
                  .kernel = runtime_only,
                  .summary = "its input, in the frame of the loop its attribute names",
                  .gradient = loop_part_gradient}),
    op_registrar({.name = "exit",
                  .role = op_role::exit_frame,
                  .num_inputs = 1,
                  .infer = exit_spec,
                  .kernel = runtime_only,
                  .summary = "a loop variable's last value, in the enclosing frame; and the count",
                  .gradient = loop_part_gradient}),
    op_registrar({.name = "next_iteration",
                  .role = op_role::next_iteration,
                  .num_inputs = 1,
                  .infer = same_spec,
                  .kernel = runtime_only,
                  .summary = "its input, to its loop merge in the next iteration",
                  .gradient = loop_part_gradient}),
    op_registrar({.name = "merge",
                  .role = op_role::merge_values,
                  .num_inputs = -1,
                  .min_inputs = 1,
                  .infer = merge_spec,
                  .kernel = runtime_only,
                  .summary = "the first live input and its index",
                  .gradient = merge_gradient}),
};

// What a branch returns, as values that exist only when it is taken: an
// output made before the branch (outside it, or in the other branch) passes
// through an identity made inside, which gates it through a switch; one made
// inside from constants alone waits on the branch's pivot.
std::vector<output> branch_outputs(graph& g, int first_inside, const std::vector<output>& outs) {
  std::vector<output> gated;
  for (auto& o : outs) {
    if (&o.owner() != &g) fail("cond", "a branch returned a tensor of another graph");
    if (o.ref().node < first_inside) {
      gated.push_back(identity(o, "branch_output"));
    } else if (!g.is_gated(o)) {
      auto after_pivot = g.control_dependencies({g.branch_pivot()});
      gated.push_back(identity(o, "branch_output"));
    } else {
      gated.push_back(o);
    }
  }
  return gated;
}

std::vector<output> build_branch(graph& g, const output& pred, int branch,
                                 const std::function<std::vector<output>()>& fn) {
  int first_inside = static_cast<int>(g.size());
  auto scope = g.cond_branch_scope(pred, branch);
  return branch_outputs(g, first_inside, fn());
}

}  // namespace

std::vector<output> switch_op(output data, output pred, const std::string& name) {
  return make_op_outputs("switch", {data, pred}, {}, name.empty() ? "switch" : name);
}

std::vector<output> merge(const std::vector<output>& inputs, const std::string& name) {
  if (inputs.empty()) fail("merge", "needs at least one input");
  return make_op_outputs("merge", inputs, {}, name.empty() ? "merge" : name);
}

std::vector<output> cond(output pred, const std::function<std::vector<output>()>& true_fn,
                         const std::function<std::vector<output>()>& false_fn,
                         const std::string& name) {
  check_predicate(pred.spec(), "cond");
  graph& g = pred.owner();
  auto scope = g.name_scope(name);
  auto when_true = build_branch(g, pred, 1, true_fn);
  auto when_false = build_branch(g, pred, 0, false_fn);
  if (when_true.size() != when_false.size())
    fail("cond", "'" + name + "': the true branch returns " + std::to_string(when_true.size()) +
                     " outputs, the false branch " + std::to_string(when_false.size()));
  std::string pred_name = pred.node().name + ":" + std::to_string(pred.ref().index);
  std::vector<output> results;
  for (size_t i = 0; i < when_true.size(); ++i) {
    auto& t = when_true[i];
    auto& f = when_false[i];
    if (t.type() != f.type() || t.dims().rank() != f.dims().rank())
      fail("cond", "'" + name + "': output " + std::to_string(i) + " is " + t.spec().to_string() +
                       " in the true branch but " + f.spec().to_string() + " in the false branch");
    results.push_back(make_op("merge", {f, t}, {{"pred", pred_name}}, "merge"));
  }
  return results;
}

namespace {

std::string unique_frame_name(const graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 1; g.find_frame(name) >= 0; ++k) name = base + "_" + std::to_string(k);
  return name;
}

void check_while_options(const std::vector<output>& vars, const while_options& o) {
  if (vars.empty()) fail("while_loop", "'" + o.name + "' has no loop variables");
  if (o.parallel_iterations < 1)
    fail("while_loop", "'" + o.name + "': parallel_iterations must be at least 1 (got " +
                           std::to_string(o.parallel_iterations) + ")");
  if (o.max_iterations < 0)
    fail("while_loop", "'" + o.name + "': max_iterations must be >= 0 (got " +
                           std::to_string(o.max_iterations) + ")");
  if (!o.shape_invariants.empty() && o.shape_invariants.size() != vars.size())
    fail("while_loop", "'" + o.name + "': " + std::to_string(o.shape_invariants.size()) +
                           " shape invariants for " + std::to_string(vars.size()) +
                           " loop variables");
  for (auto& v : vars)
    if (&v.owner() != &vars[0].owner())
      fail("while_loop", "'" + o.name + "': loop variables come from different graphs");
}

// The body's value for loop variable i must keep its dtype and fit its
// shape invariant: every dim the invariant knows, the value has, the same.
void check_body_value(const std::string& loop, size_t i, const output& entered,
                      const shape& invariant, const output& value) {
  auto& got = value.spec();
  bool fits = got.type == entered.type() && got.dims.rank() == invariant.rank();
  for (int d = 0; fits && d < invariant.rank(); ++d)
    fits = invariant[d] == shape::unknown || got.dims[d] == invariant[d];
  if (!fits)
    fail("while_loop",
         "'" + loop + "': loop variable " + std::to_string(i) + " enters as " +
             entered.spec().to_string() + " (shape invariant " + invariant.to_string() +
             ") but the body returns " + got.to_string() +
             (got.type == entered.type() ? "; give a shape invariant that lets it change" : ""));
}

}  // namespace

std::vector<output> while_loop(const loop_cond_fn& cond_fn, const loop_body_fn& body_fn,
                               const std::vector<output>& loop_vars, const while_options& options) {
  check_while_options(loop_vars, options);
  graph& g = loop_vars[0].owner();
  auto scope = g.name_scope(options.name);
  std::string frame_name = unique_frame_name(g, options.name);
  std::vector<output> enters;
  for (auto& v : loop_vars)
    enters.push_back(make_op("enter", {v},
                             {{"frame", frame_name},
                              {"is_constant", false},
                              {"parallel_iterations", options.parallel_iterations}},
                             "enter"));
  int frame = g.frame_of(enters[0].ref().node);
  std::vector<shape> invariants;
  for (size_t i = 0; i < enters.size(); ++i)
    invariants.push_back(options.shape_invariants.empty() ? enters[i].dims()
                                                          : options.shape_invariants[i]);
  std::vector<output> merges, switches, body_inputs, exits;
  {
    auto body = g.loop_body_scope(frame, enters[0].ref().node);
    for (size_t i = 0; i < enters.size(); ++i) {
      std::vector<int64_t> dims(invariants[i].dims().begin(), invariants[i].dims().end());
      merges.push_back(
          make_op("merge", {enters[i]}, {{"frame", frame_name}, {"dims", dims}}, "merge"));
    }
    g.set_loop_pivot(merges[0].ref().node);
    output pred = cond_fn(merges);
    if (!pred.valid() || &pred.owner() != &g)
      fail("while_loop", "'" + options.name + "': the condition returned no tensor of this graph");
    if (pred.type() != dtype::boolean || !pred.dims().compatible_with(shape{}))
      fail("while_loop", "'" + options.name + "': the condition must return a scalar bool, not " +
                             pred.spec().to_string());
    for (auto& m : merges) {
      auto outs = make_op_outputs("switch", {m, pred}, {{"frame", frame_name}}, "switch");
      switches.push_back(outs[0]);
      body_inputs.push_back(outs[1]);
    }
    // The first switch fires in every iteration, and its control consumers
    // hear when the loop ends: it is the body's pivot.
    g.set_loop_pivot(switches[0].ref().node);
    auto results = body_fn(body_inputs);
    if (results.size() != merges.size())
      fail("while_loop", "'" + options.name + "': the body returns " +
                             std::to_string(results.size()) + " values for " +
                             std::to_string(merges.size()) + " loop variables");
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].valid() || &results[i].owner() != &g)
        fail("while_loop", "'" + options.name + "': the body's value " + std::to_string(i) +
                               " is no tensor of this graph");
      check_body_value(options.name, i, enters[i], invariants[i], results[i]);
      // A value that does not change per iteration (an invariant, a
      // constant) goes round through an identity that fires every time.
      output next = g.fires_every_iteration(results[i]) ? results[i] : identity(results[i]);
      make_op("next_iteration", {next},
              {{"frame", frame_name},
               {"merge", merges[i].node().name},
               {"max_iterations", options.max_iterations},
               {"parallel_iterations", options.parallel_iterations}},
              "next_iteration");
    }
  }
  for (auto& sw : switches) exits.push_back(make_op_outputs("exit", {sw}, {}, "exit")[0]);
  return exits;
}

output cond(output pred, const std::function<output()>& true_fn,
            const std::function<output()>& false_fn, const std::string& name) {
  return cond(
      pred, [&] { return std::vector<output>{true_fn()}; },
      [&] { return std::vector<output>{false_fn()}; }, name)[0];
}

}  // namespace actorflow
