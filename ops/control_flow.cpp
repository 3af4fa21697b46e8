#include "ops/control_flow.hpp"

#include "ops/op_util.hpp"
#include "ops/state.hpp"

namespace actorflow {

namespace {

// The runtime runs switch and merge itself (actors/node_actor.cpp): their
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

std::vector<tensor_spec> merge_spec(const shape_context& c) {
  return {common_spec(c.inputs, c.op), {dtype::int32, shape{}}};
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

const op_registrar registrations[] = {
    op_registrar({.name = "switch",
                  .num_inputs = 2,
                  .infer = switch_spec,
                  .kernel = runtime_only,
                  .summary = "data to output 1 if pred, else to output 0; dead to the other",
                  .gradient = switch_gradient}),
    op_registrar({.name = "merge",
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

output cond(output pred, const std::function<output()>& true_fn,
            const std::function<output()>& false_fn, const std::string& name) {
  return cond(
      pred, [&] { return std::vector<output>{true_fn()}; },
      [&] { return std::vector<output>{false_fn()}; }, name)[0];
}

}  // namespace actorflow
