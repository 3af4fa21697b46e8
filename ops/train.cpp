#include "ops/train.hpp"

#include "core/gradients.hpp"
#include "ops/array.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/reduce.hpp"

namespace actorflow {

namespace {

const char* const kGlobalStep = "global_step";

// Every float variable node of the graph, in creation order.
std::vector<variable> float_variables(graph& g) {
  std::vector<variable> vars;
  for (auto& n : g.nodes())
    if (n.def->role == op_role::variable && is_differentiable_type(n.outputs[0].type))
      vars.emplace_back(output(&g, {n.id, 0}), operation());
  return vars;
}

output apply_op(const char* op, const variable& v, output grad, output lr, output grad_scale,
                attr_map attrs) {
  std::vector<output> inputs{v.value(), grad, lr};
  if (grad_scale.valid()) inputs.push_back(grad_scale);
  return make_op(op, inputs, std::move(attrs), v.name() + "/" + op);
}

output apply_rows_op(const char* op, const variable& v, output rows, output indices, output lr,
                     output grad_scale, attr_map attrs) {
  std::vector<output> inputs{v.value(), rows, indices, lr};
  if (grad_scale.valid()) inputs.push_back(grad_scale);
  return make_op(op, inputs, std::move(attrs), v.name() + "/" + op);
}

// Whether n scatters rows into a tensor along axis 0 (the gradient of a gather).
bool scatters_rows(const node& n) {
  return n.op == "scatter_add_like" && get_attr_or<int64_t>(n.attrs, "axis", n.op, 0) == 0;
}

}  // namespace

std::pair<output, output> gathered_rows_of(const output& grad, const variable& v) {
  const node& n = grad.node();
  if (!scatters_rows(n) || !(n.inputs[2] == v.value().ref())) return {};
  graph* g = &grad.owner();
  return {output(g, n.inputs[0]), output(g, n.inputs[1])};
}

variable global_step(graph& g) {
  if (auto* n = g.find(kGlobalStep)) {
    if (n->def->role != op_role::variable || n->outputs[0].type != dtype::int64 ||
        n->outputs[0].dims.rank() != 0)
      fail(kGlobalStep, "node 'global_step' exists but is not an int64 scalar variable");
    const node* init = g.find(std::string(kGlobalStep) + "/init");
    return variable(output(&g, {n->id, 0}), init ? operation(&g, init->id) : operation());
  }
  return make_variable(scalar<int64_t>(g, 0, "global_step/initial_value"), kGlobalStep);
}

output learning_rate::in(graph& g) const {
  if (tensor_.valid()) return tensor_;
  return scalar<double>(g, value_, "learning_rate");
}

grads_and_vars optimizer::compute_gradients(output loss, std::vector<variable> vars) const {
  bool all = vars.empty();
  if (all) vars = float_variables(loss.owner());
  std::vector<output> xs(vars.begin(), vars.end());
  auto grads = gradients({loss}, xs);
  grads_and_vars pairs;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (grads[i].valid())
      pairs.emplace_back(grads[i], vars[i]);
    else if (!all)
      fail("minimize", "variable '" + vars[i].name() + "' does not affect '" + loss.name() + "'");
  }
  if (pairs.empty()) fail("minimize", "'" + loss.name() + "' depends on no float variable");
  return pairs;
}

namespace {

// The nodes the updates' inputs are computed from (their ancestors), or
// nothing when control flow is among them (see readers_before_update).
std::vector<bool> gradient_ancestors(const graph& g, const std::vector<output>& grads) {
  std::vector<bool> seen(g.nodes().size(), false);
  std::vector<int> pending;
  for (auto& grad : grads)
    if (grad.valid()) pending.push_back(grad.ref().node);
  while (!pending.empty()) {
    int id = pending.back();
    pending.pop_back();
    if (seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    const node& n = g.at(id);
    for (const char* op : {"switch", "merge", "enter", "exit", "next_iteration"})
      if (n.op == op) return {};
    for (auto& in : n.inputs) pending.push_back(in.node);
    for (int c : n.control_inputs) pending.push_back(c);
  }
  return seen;
}

// The nodes among `ancestors` that read v's value. Its update waits for them
// (control dependencies): an update finding its value still held by a reader
// copies the whole value first (copy-on-write), and a weight's update is
// ready (its gradient done) while the gradient for the layer below still
// reads it: AlexNet's 151 MB first dense layer was copied on every step.
// Control flow in the gradients: none (a dependency on a node in a loop or
// an untaken branch would stop the update).
std::vector<operation> readers_before_update(graph& g, const variable& v,
                                             const std::vector<bool>& ancestors) {
  std::vector<operation> readers;
  if (ancestors.empty()) return readers;
  const int read = v.value().ref().node;
  for (const node& n : g.nodes()) {
    // Nodes added since (the updates made so far) read nothing yet.
    if (static_cast<size_t>(n.id) >= ancestors.size() || !ancestors[static_cast<size_t>(n.id)])
      continue;
    for (auto& in : n.inputs)
      if (in.node == read) {
        readers.emplace_back(&g, n.id);
        break;
      }
  }
  return readers;
}

}  // namespace

operation optimizer::apply_gradients(const grads_and_vars& pairs, const std::string& name) {
  if (pairs.empty()) fail("apply_gradients", "no gradients to apply");
  graph& g = pairs[0].second.value().owner();
  std::vector<output> grads;
  for (auto& [grad, var] : pairs) grads.push_back(grad);
  output grad_scale;
  if (options_.clip_global_norm > 0)
    grad_scale = global_norm_clip_scale(grads, options_.clip_global_norm).scale;
  output lr = lr_.in(g);
  // Weight decay moves every row: it needs the dense update.
  bool rows_only = options_.row_updates && options_.weight_decay == 0;
  // What each update reads: its gradient's rows where it updates rows only,
  // else the whole gradient; and the clipping scale.
  std::vector<std::pair<output, output>> rows(pairs.size());
  std::vector<output> consumed{grad_scale};
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (rows_only) rows[i] = gathered_rows_of(grads[i], pairs[i].second);
    if (rows[i].first.valid()) {
      consumed.push_back(rows[i].first);
      consumed.push_back(rows[i].second);
    } else {
      consumed.push_back(grads[i]);
    }
  }
  const auto ancestors = gradient_ancestors(g, consumed);
  std::vector<operation> updates;
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto& v = pairs[i].second;
    auto after_readers = g.control_dependencies(readers_before_update(g, v, ancestors));
    output update;
    if (rows[i].first.valid())
      update = apply_rows(v, rows[i].first, rows[i].second, lr, grad_scale);
    // An optimizer without row updates (its slots move every row) takes the
    // whole gradient, whose ancestors include the rows': no reader waited for
    // is one the update would not need.
    if (!update.valid()) update = apply(v, grads[i], lr, grad_scale);
    updates.emplace_back(&g, update.ref().node);
  }
  auto step = global_step(g);
  auto after = g.control_dependencies(updates);
  auto increment = assign_add(step, scalar<int64_t>(g, 1), name);
  return operation(&g, increment.ref().node);
}

operation optimizer::minimize(output loss, std::vector<variable> vars, const std::string& name) {
  return apply_gradients(compute_gradients(loss, std::move(vars)), name);
}

output sgd::apply(const variable& v, output grad, output lr, output grad_scale) {
  return apply_op("apply_sgd", v, grad, lr, grad_scale, common_attrs());
}

output sgd::apply_rows(const variable& v, output rows, output indices, output lr,
                       output grad_scale) {
  return apply_rows_op("apply_sgd_rows", v, rows, indices, lr, grad_scale, {});
}

output momentum::apply(const variable& v, output grad, output lr, output grad_scale) {
  auto attrs = common_attrs();
  attrs["momentum"] = mu_;
  attrs["nesterov"] = nesterov_;
  return apply_op("apply_momentum", v, grad, lr, grad_scale, std::move(attrs));
}

attr_map adam::adam_attrs() const {
  return {{"beta1", beta1_}, {"beta2", beta2_}, {"epsilon", epsilon_}};
}

output adam::apply(const variable& v, output grad, output lr, output grad_scale) {
  auto attrs = common_attrs();
  attrs.merge(adam_attrs());
  return apply_op("apply_adam", v, grad, lr, grad_scale, std::move(attrs));
}

// Row updates run without weight decay (apply_gradients sees to it).
output lazy_adam::apply_rows(const variable& v, output rows, output indices, output lr,
                             output grad_scale) {
  return apply_rows_op("apply_adam_rows", v, rows, indices, lr, grad_scale, adam_attrs());
}

output rmsprop::apply(const variable& v, output grad, output lr, output grad_scale) {
  auto attrs = common_attrs();
  attrs["rho"] = rho_;
  attrs["epsilon"] = epsilon_;
  attrs["momentum"] = mu_;
  return apply_op("apply_rmsprop", v, grad, lr, grad_scale, std::move(attrs));
}

output adagrad::apply(const variable& v, output grad, output lr, output grad_scale) {
  auto attrs = common_attrs();
  attrs["initial_accumulator"] = initial_;
  attrs["epsilon"] = epsilon_;
  return apply_op("apply_adagrad", v, grad, lr, grad_scale, std::move(attrs));
}

output adagrad::apply_rows(const variable& v, output rows, output indices, output lr,
                           output grad_scale) {
  return apply_rows_op("apply_adagrad_rows", v, rows, indices, lr, grad_scale,
                       {{"initial_accumulator", initial_}, {"epsilon", epsilon_}});
}

std::unique_ptr<optimizer> make_optimizer(const std::string& name, learning_rate lr,
                                          optimizer_options o) {
  if (name == "sgd") return std::make_unique<sgd>(lr, o);
  if (name == "momentum") return std::make_unique<momentum>(lr, 0.9, false, o);
  if (name == "nesterov") return std::make_unique<momentum>(lr, 0.9, true, o);
  if (name == "adam") return std::make_unique<adam>(lr, 0.9, 0.999, 1e-8, o);
  if (name == "lazy_adam") return std::make_unique<lazy_adam>(lr, 0.9, 0.999, 1e-8, o);
  if (name == "rmsprop") return std::make_unique<rmsprop>(lr, 0.9, 1e-8, 0.0, o);
  if (name == "adagrad") return std::make_unique<adagrad>(lr, 0.1, 1e-10, o);
  fail("optimizer", "unknown optimizer '" + name +
                        "' (choose sgd, momentum, nesterov, adam, lazy_adam, rmsprop or adagrad)");
}

clipped_gradients clip_by_global_norm(const std::vector<output>& grads, double clip_norm) {
  auto clip = global_norm_clip_scale(grads, clip_norm);
  clipped_gradients out{{}, clip.global_norm};
  for (auto& g : grads) out.grads.push_back(g * clip.scale);
  return out;
}

namespace {

// Half of grad's squared norm, as TensorFlow's global_norm takes it: an
// l2_loss (one pass, no squared copy). It runs where grad is made, so that
// only the scalar travels to the sum: a gradient made on a parameter server
// (beside its variable) is not sent elsewhere to be measured. A gathered
// gradient is measured from its rows where they are made, without the dense
// tensor (l2_loss_rows sums repeated rows first, as the scatter does).
output half_squared_norm(const output& grad) {
  graph& g = grad.owner();
  const node& n = grad.node();
  if (scatters_rows(n)) {
    output rows(&g, n.inputs[0]), indices(&g, n.inputs[1]);
    auto beside_rows = g.device_scope(rows.node().device);
    return l2_loss_rows(rows, indices);
  }
  auto beside_grad = g.device_scope(n.device);
  return l2_loss(grad);
}

}  // namespace

global_norm_clip global_norm_clip_scale(const std::vector<output>& grads, double clip_norm) {
  if (grads.empty()) fail("clip_by_global_norm", "no gradients");
  if (!(clip_norm > 0)) fail("clip_by_global_norm", "clip_norm must be positive");
  dtype type = grads[0].type();
  output half_sum_sq;
  for (auto& g : grads) {
    if (g.type() != type)
      fail("clip_by_global_norm",
           "gradients mix " + std::string(dtype_name(type)) + " and " + dtype_name(g.type()));
    auto term = half_squared_norm(g);
    half_sum_sq = half_sum_sq.valid() ? half_sum_sq + term : term;
  }
  global_norm_clip out;
  out.global_norm = sqrt(half_sum_sq * scalar_like(half_sum_sq, 2.0));
  auto limit = scalar_like(out.global_norm, clip_norm);
  out.scale = limit / maximum(out.global_norm, limit);
  return out;
}

}  // namespace actorflow
