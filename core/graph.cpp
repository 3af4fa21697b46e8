#include "core/graph.hpp"

#include <algorithm>
#include <utility>

namespace actorflow {

graph& output::owner() const {
  if (!graph_) fail("graph", "use of an empty output handle");
  return *graph_;
}
const node& output::node() const { return owner().at(endpoint_.node); }
const tensor_spec& output::spec() const {
  return node().outputs.at(static_cast<size_t>(endpoint_.index));
}
std::string output::name() const {
  auto& n = node().name;
  return endpoint_.index == 0 ? n : n + ":" + std::to_string(endpoint_.index);
}

graph& operation::owner() const {
  if (!graph_) fail("graph", "use of an empty operation handle");
  return *graph_;
}
const node& operation::node() const { return owner().at(node_); }

const node& graph::at(int id) const {
  if (id < 0 || static_cast<size_t>(id) >= nodes_.size())
    fail("graph", "no node with id " + std::to_string(id));
  return nodes_[static_cast<size_t>(id)];
}

const node* graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &nodes_[static_cast<size_t>(it->second)];
}

output graph::output_by_name(const std::string& name) {
  auto colon = name.rfind(':');
  std::string base = name;
  int index = 0;
  if (colon != std::string::npos && colon + 1 < name.size() &&
      std::all_of(name.begin() + colon + 1, name.end(), ::isdigit)) {
    base = name.substr(0, colon);
    index = std::stoi(name.substr(colon + 1));
  }
  auto n = find(base);
  if (!n) fail("graph", "no node named '" + base + "'");
  if (index >= static_cast<int>(n->outputs.size()))
    fail("graph", "node '" + base + "' has no output " + std::to_string(index));
  return output(this, {n->id, index});
}

operation graph::operation_by_name(const std::string& name) {
  auto n = find(name);
  if (!n) fail("graph", "no node named '" + name + "'");
  return operation(this, n->id);
}

std::string graph::unique_name(const std::string& base) {
  std::string prefix;
  for (auto& s : name_scopes_) prefix += s + "/";
  std::string name = prefix + base;
  if (!by_name_.count(name)) return name;
  int& count = name_counts_[name];
  std::string candidate;
  do candidate = name + "_" + std::to_string(++count);
  while (by_name_.count(candidate));
  return candidate;
}

const node& graph::add_node(const std::string& op, std::vector<output> inputs, attr_map attrs,
                            const std::string& name) {
  std::vector<endpoint> refs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (&inputs[i].owner() != this)
      fail(op,
           "input " + std::to_string(i) + " ('" + inputs[i].name() + "') belongs to another graph");
    refs.push_back(inputs[i].ref());
  }
  std::vector<int> control = control_deps_;
  bool gated = false;
  if (!cond_branches_.empty()) {
    const op_def& def = op_registry::global().get(op);
    // Input 0 of an op on a resource is the resource itself, not a value.
    size_t first = def.acts_on_resource() ? 1 : 0;
    for (size_t i = first; i < refs.size(); ++i) {
      refs[i] = into_branch(refs[i]);
      gated |= cond_branches_.back().gated.count(refs[i].node) > 0;
    }
    for (int c : control) gated |= cond_branches_.back().gated.count(c) > 0;
    if (!gated && (def.stateful || def.acts_on_resource())) {
      control.push_back(cond_branches_.back().pivot);
      gated = true;
    }
  }
  std::string device = device_for(op, attrs);
  const node& n = add_node_raw(op, refs, control, std::move(attrs),
                               unique_name(name.empty() ? op : name), device);
  // Gated in the innermost branch is gated in the enclosing ones too: the
  // inner branch's switches take their inputs through the outer ones.
  if (gated)
    for (auto& b : cond_branches_) b.gated.insert(n.id);
  return n;
}

bool graph::is_gated(const output& o) const {
  return cond_branches_.empty() || cond_branches_.back().gated.count(o.ref().node) > 0;
}

operation graph::branch_pivot() {
  if (cond_branches_.empty()) fail("cond", "no cond branch is open");
  return operation(this, cond_branches_.back().pivot);
}

// An output from outside the innermost branch, as the branch sees it: the
// branch's output of a switch on its predicate, made once per output and
// predicate (so a cond's two branches share it, each using its own output).
// The switch belongs to the enclosing branches, which gate its inputs in turn.
endpoint graph::into_branch(const endpoint& e) {
  if (e.node >= cond_branches_.back().first_node) return e;
  auto key = std::make_pair(e.node, e.index);
  if (auto it = cond_branches_.back().switched.find(key);
      it != cond_branches_.back().switched.end())
    return it->second;
  cond_branch inner = std::move(cond_branches_.back());
  cond_branches_.pop_back();
  // Shared only within one enclosing branch: a switch made in another one
  // is gated by that branch.
  int enclosing = cond_branches_.empty() ? -1 : cond_branches_.back().pivot;
  auto shared = std::make_tuple(inner.pred.node, inner.pred.index, e.node, e.index, enclosing);
  auto made = branch_switches_.find(shared);
  // The switch serves both branches: control dependencies opened inside
  // this one are not its own (the nodes that use it carry them).
  int sw = -1;
  auto control = std::exchange(control_deps_, {});
  try {
    sw =
        made != branch_switches_.end()
            ? made->second
            : add_node("switch", {output(this, e), output(this, inner.pred)}, {}, "cond/switch").id;
  } catch (...) {
    control_deps_ = std::move(control);
    cond_branches_.push_back(std::move(inner));
    throw;
  }
  control_deps_ = std::move(control);
  branch_switches_[shared] = sw;
  endpoint gated{sw, inner.branch};
  inner.switched.emplace(key, gated);
  inner.gated.insert(sw);  // only its output `branch` is used inside
  cond_branches_.push_back(std::move(inner));
  return gated;
}

graph::scope_guard graph::cond_branch_scope(const output& pred, int branch) {
  if (&pred.owner() != this) fail("cond", "the predicate belongs to another graph");
  if (branch != 0 && branch != 1) fail("cond", "a branch is 0 (false) or 1 (true)");
  const node& sw = add_node("switch", {pred, pred}, {}, "cond/pivot_switch");
  const node& pivot = add_node("identity", {output(this, {sw.id, branch})}, {},
                               branch == 1 ? "cond/pivot_true" : "cond/pivot_false");
  cond_branch b;
  b.pred = pred.ref();
  b.branch = branch;
  b.pivot = pivot.id;
  b.gated.insert(pivot.id);
  b.first_node = static_cast<int>(nodes_.size());
  cond_branches_.push_back(std::move(b));
  return scope_guard(&cond_branches_);
}

const node& graph::add_node_raw(const std::string& op, const std::vector<endpoint>& inputs,
                                const std::vector<int>& control_inputs, attr_map attrs,
                                const std::string& name, const std::string& device) {
  const op_def& def = op_registry::global().get(op);
  if (name.empty()) fail(op, "node without a name");
  if (by_name_.count(name)) fail(op, "a node named '" + name + "' exists already");
  int id = static_cast<int>(nodes_.size());
  std::vector<tensor_spec> specs;
  std::vector<tensor> constants;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto e = inputs[i];
    if (e.node < 0 || e.node >= id)
      fail(op, "node '" + name + "' input " + std::to_string(i) + " names node " +
                   std::to_string(e.node) + ", which is not an earlier node");
    auto& src = nodes_[static_cast<size_t>(e.node)];
    if (e.index < 0 || e.index >= static_cast<int>(src.outputs.size()))
      fail(op, "node '" + name + "' input " + std::to_string(i) + " names output " +
                   std::to_string(e.index) + " of '" + src.name + "', which has " +
                   std::to_string(src.outputs.size()));
    specs.push_back(src.outputs[static_cast<size_t>(e.index)]);
    auto value = src.attrs.find("value");
    constants.push_back(src.op == "constant" && value != src.attrs.end()
                            ? std::get<tensor>(value->second)
                            : tensor());
  }
  for (int c : control_inputs)
    if (c < 0 || c >= id)
      fail(op, "node '" + name + "' control input names node " + std::to_string(c) +
                   ", which is not an earlier node");
  if (def.acts_on_resource() &&
      (inputs.empty() || nodes_[static_cast<size_t>(inputs[0].node)].op != def.resource_op()))
    fail(op, "node '" + name + "': input 0 must be a " + def.resource_op());
  node n;
  n.id = id;
  n.name = name;
  n.op = op;
  n.device = device;
  n.inputs = inputs;
  n.control_inputs = control_inputs;
  n.attrs = std::move(attrs);
  n.def = &def;
  try {
    n.outputs = infer_outputs(def, specs, n.attrs, &constants);
  } catch (const error& e) {
    std::string shapes;
    for (auto& s : specs) shapes += (shapes.empty() ? "" : ", ") + s.to_string();
    throw error(std::string(e.what()) + " (node '" + name + "', inputs: " + shapes + ")");
  }
  by_name_.emplace(name, id);
  nodes_.push_back(std::move(n));
  return nodes_.back();
}

graph::scope_guard graph::name_scope(const std::string& scope) {
  name_scopes_.push_back(scope);
  return scope_guard(&name_scopes_);
}

graph::scope_guard graph::device_scope(const std::string& device) {
  device_name::parse(device);  // throws for a malformed name, now rather than at run time
  device_scopes_.push_back({device, {}});
  return scope_guard(&device_scopes_);
}

graph::scope_guard graph::device_function_scope(device_function fn) {
  if (!fn) fail("graph", "device_function_scope needs a function");
  device_scopes_.push_back({"", std::move(fn)});
  return scope_guard(&device_scopes_);
}

std::string graph::device_for(const std::string& op, const attr_map& attrs) const {
  std::string device;
  for (auto& scope : device_scopes_) {
    if (scope.fn)
      device = scope.fn(op, attrs, device);
    else
      device = device_name::parse(scope.name).merged_onto(device_name::parse(device)).to_string();
  }
  return device;
}

graph::control_guard graph::control_dependencies(const std::vector<operation>& deps) {
  size_t depth = control_deps_.size();
  for (auto& d : deps) {
    if (&d.owner() != this) fail("graph", "control dependency on a node of another graph");
    control_deps_.push_back(d.id());
  }
  return control_guard(this, depth);
}

}  // namespace actorflow
