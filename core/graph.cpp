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
  const op_def& def = op_registry::global().get(op);
  // Input 0 of an op on a resource is the resource itself, not a value.
  size_t first = def.acts_on_resource() ? 1 : 0;
  std::vector<int> control = control_deps_;
  // An exit's input lies in the loop it leaves, inside the current frame.
  if (def.role == op_role::exit_frame) first = refs.size();
  if (!resolvers_.empty())
    for (size_t i = first; i < refs.size(); ++i)
      if (!fits_every_frame(refs[i].node) && !frame_within(current_frame(), frame_of(refs[i].node)))
        refs[i] = resolvers_.back()(refs[i], current_frame());
  bool gated = false;
  bool in_loop = innermost_is_loop();
  if (!cond_branches_.empty() || !loop_bodies_.empty()) {
    for (size_t i = first; i < refs.size(); ++i) refs[i] = into_context(refs[i]);
  }
  for (size_t i = first; i < refs.size(); ++i) {
    int from = frame_of(refs[i].node);
    if (from != current_frame() && !fits_every_frame(refs[i].node))
      fail(op, "'" + nodes_[static_cast<size_t>(refs[i].node)].name + "' lies inside loop '" +
                   frames_[static_cast<size_t>(from)].name +
                   "' and cannot be used outside it; use the loop's outputs");
  }
  if (!cond_branches_.empty()) {
    for (size_t i = first; i < refs.size(); ++i)
      gated |= cond_branches_.back().gated.count(refs[i].node) > 0;
    for (int c : control) gated |= cond_branches_.back().gated.count(c) > 0;
    // Inside a loop body the loop's pivot rule below applies instead: the
    // loop itself is gated through its enters.
    if (!gated && !in_loop &&
        (def.stateful || def.acts_on_resource() || def.role == op_role::enter_frame)) {
      control.push_back(cond_branches_.back().pivot);
      gated = true;
    }
  }
  bool per_iteration = false;
  if (in_loop && def.role != op_role::exit_frame) {
    auto& body = loop_bodies_.back();
    for (size_t i = first; i < refs.size(); ++i)
      per_iteration |= body.per_iteration.count(refs[i].node) > 0;
    for (int c : control) per_iteration |= body.per_iteration.count(c) > 0;
    bool folded_constant = def.role == op_role::constant && control.empty();
    if (!per_iteration && !folded_constant) {
      control.push_back(body.pivot);
      per_iteration = true;
    }
  }
  std::string device = device_for(op, attrs);
  if (!colocations_.empty()) attrs["_colocate_with"] = colocations_.back();
  const node& n = add_node_raw(op, refs, control, std::move(attrs),
                               unique_name(name.empty() ? op : name), device);
  // Gated in the innermost branch is gated in the enclosing ones too: the
  // inner branch's switches take their inputs through the outer ones.
  if (gated)
    for (auto& b : cond_branches_) b.gated.insert(n.id);
  if (def.role == op_role::exit_frame && in_loop)
    per_iteration = true;  // once per iteration of the outer loop
  if (per_iteration) loop_bodies_.back().per_iteration.insert(n.id);
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

bool graph::innermost_is_loop() const {
  if (loop_bodies_.empty()) return false;
  if (cond_branches_.empty()) return true;
  return loop_bodies_.back().first_node > cond_branches_.back().first_node;
}

bool graph::fires_every_iteration(const output& o) const {
  return !loop_bodies_.empty() && loop_bodies_.back().per_iteration.count(o.ref().node) > 0;
}

int graph::find_frame(const std::string& name) const {
  auto it = frame_by_name_.find(name);
  return it == frame_by_name_.end() ? -1 : it->second;
}

int graph::current_frame() const { return loop_bodies_.empty() ? -1 : loop_bodies_.back().frame; }

bool graph::frame_within(int inner, int outer) const {
  for (int f = inner;; f = frames_[static_cast<size_t>(f)].parent) {
    if (f == outer) return true;
    if (f < 0) return false;
  }
}

// Constants without control inputs are folded into their consumers and
// send no message, so they fit every frame; a recv (a partition's end of a
// cut edge) carries whatever frame its send's value had.
bool graph::fits_every_frame(int id) const {
  auto& n = nodes_[static_cast<size_t>(id)];
  return (n.def->role == op_role::constant && n.control_inputs.empty()) ||
         n.def->role == op_role::recv || node_frame_[static_cast<size_t>(id)] == follows_recv;
}

// A constant's value, also as a cond's branch sees it (through the switch
// that gates it), for shape inference; empty for any other node.
tensor graph::constant_value(int id) const {
  const node* n = &nodes_[static_cast<size_t>(id)];
  while (n->def->role == op_role::switch_value)  // nested conds switch it once each
    n = &nodes_[static_cast<size_t>(n->inputs[0].node)];
  auto value = n->attrs.find("value");
  if (n->def->role != op_role::constant || value == n->attrs.end()) return tensor();
  return std::get<tensor>(value->second);
}

// Constants stay folded into a loop's nodes, but enter a cond's branch
// through a switch as any other input, so that the gradient of a constant
// a branch reads comes back through the switch's gradient, live whichever
// branch ran.
endpoint graph::into_context(const endpoint& e) {
  const bool constant = nodes_[static_cast<size_t>(e.node)].def->role == op_role::constant;
  if (fits_every_frame(e.node) && (innermost_is_loop() || !constant)) return e;
  return innermost_is_loop() ? into_loop(e) : into_branch(e);
}

// An output from outside the innermost loop body, as the body sees it: the
// output of an enter of the loop's frame marked as a loop invariant, made
// once per output. The enter itself belongs to the enclosing context, which
// maps its input in turn.
endpoint graph::into_loop(const endpoint& e) {
  auto& body = loop_bodies_.back();
  int from = frame_of(e.node);
  if (from == body.frame) return e;
  auto& frame = frames_[static_cast<size_t>(body.frame)];
  if (frame_within(from, body.frame))
    fail("while_loop", "'" + nodes_[static_cast<size_t>(e.node)].name +
                           "' lies inside a loop nested in '" + frame.name +
                           "' and cannot be used outside it; use that loop's outputs");
  if (!frame_within(body.frame, from))
    fail("while_loop", "'" + nodes_[static_cast<size_t>(e.node)].name +
                           "' lies inside another loop and cannot be used in '" + frame.name + "'");
  auto key = std::make_pair(e.node, e.index);
  if (auto it = body.invariants.find(key); it != body.invariants.end()) return it->second;
  loop_body inner = std::move(loop_bodies_.back());
  loop_bodies_.pop_back();
  auto control = std::exchange(control_deps_, inner.outer_control);
  int enter = -1;
  try {
    enter = add_node("enter", {output(this, e)}, {{"frame", frame.name}, {"is_constant", true}},
                     "invariant_enter")
                .id;
  } catch (...) {
    control_deps_ = std::move(control);
    loop_bodies_.push_back(std::move(inner));
    throw;
  }
  control_deps_ = std::move(control);
  endpoint entered{enter, 0};
  inner.invariants.emplace(key, entered);
  loop_bodies_.push_back(std::move(inner));
  return entered;
}

graph::scope_guard graph::loop_body_scope(int frame, int pivot) {
  if (frame < 0 || static_cast<size_t>(frame) >= frames_.size())
    fail("while_loop", "no loop frame " + std::to_string(frame));
  loop_body b;
  b.frame = frame;
  b.pivot = pivot;
  b.first_node = static_cast<int>(nodes_.size());
  b.outer_control = std::exchange(control_deps_, {});
  // The frame's nodes made so far (its enters and merges) fire every iteration.
  for (size_t id = 0; id < nodes_.size(); ++id)
    if (node_frame_[id] == frame && !is_loop_invariant(nodes_[id]))
      b.per_iteration.insert(static_cast<int>(id));
  loop_bodies_.push_back(std::move(b));
  return scope_guard(std::function<void()>([this] {
    control_deps_ = std::move(loop_bodies_.back().outer_control);
    loop_bodies_.pop_back();
  }));
}

void graph::set_loop_pivot(int pivot) {
  if (loop_bodies_.empty()) fail("while_loop", "no loop body is open");
  loop_bodies_.back().pivot = pivot;
  loop_bodies_.back().per_iteration.insert(pivot);
}

graph::scope_guard graph::frame_resolver_scope(frame_resolver fn) {
  resolvers_.push_back(std::move(fn));
  return scope_guard(&resolvers_);
}

static std::string frame_label(const std::vector<graph::loop_frame_info>& frames, int f) {
  return f < 0 ? std::string("the step's frame")
               : "loop '" + frames[static_cast<size_t>(f)].name + "'";
}

// The frame a new node lives in, from its inputs (see loop_frame_info); a
// malformed frame (an exit without an enter, inputs from two frames, a
// next_iteration that feeds no loop merge) throws naming the node.
int graph::structural_frame(const std::string& op, const std::vector<endpoint>& inputs,
                            const std::vector<int>& control_inputs, const attr_map& attrs,
                            const std::string& name) {
  const op_def& def = op_registry::global().get(op);
  size_t first = def.acts_on_resource() ? 1 : 0;
  int frame = -2;  // none seen yet
  auto meet = [&](int id) {
    if (fits_every_frame(id)) return;
    int f = node_frame_[static_cast<size_t>(id)];
    if (frame == -2) frame = f;
    if (f != frame)
      fail(op, "node '" + name + "' takes inputs from " + frame_label(frames_, frame) +
                   " and from " + frame_label(frames_, f) + " ('" +
                   nodes_[static_cast<size_t>(id)].name +
                   "'); a value enters a loop through an enter and leaves it through an exit");
  };
  if (def.role == op_role::enter_frame) {
    for (auto& in : inputs) meet(in.node);
    for (int c : control_inputs) meet(c);
    int parent = frame == -2 ? -1 : frame;
    auto frame_name = get_attr<std::string>(attrs, "frame", op);
    if (frame_name.empty()) fail(op, "node '" + name + "' names no frame");
    auto [it, fresh] = frame_by_name_.try_emplace(frame_name, static_cast<int>(frames_.size()));
    if (fresh) {
      frames_.push_back({frame_name, parent});
    } else if (frames_[static_cast<size_t>(it->second)].parent != parent) {
      fail(op, "node '" + name + "' enters loop '" + frame_name + "' from " +
                   frame_label(frames_, parent) + ", but the loop's other enters come from " +
                   frame_label(frames_, frames_[static_cast<size_t>(it->second)].parent));
    }
    return it->second;
  }
  for (size_t i = first; i < inputs.size(); ++i) meet(inputs[i].node);
  if (def.role != op_role::exit_frame)
    for (int c : control_inputs) meet(c);
  if (frame == -2) {
    // Only recvs, and what follows them alone, may carry a loop's values in
    // a partition that holds none of its enters: such a node fits any frame.
    bool after_recv = false;
    for (size_t i = first; i < inputs.size(); ++i) {
      auto& src = nodes_[static_cast<size_t>(inputs[i].node)];
      after_recv |= src.def->role == op_role::recv ||
                    node_frame_[static_cast<size_t>(src.id)] == follows_recv;
    }
    frame = after_recv && def.role != op_role::exit_frame ? follows_recv : -1;
  }
  if (def.role == op_role::exit_frame) {
    if (frame < 0)
      fail(op, "node '" + name + "' is an exit without an enter: its input is in no loop");
    return frames_[static_cast<size_t>(frame)].parent;
  }
  if (def.role == op_role::next_iteration) {
    auto merge_name = get_attr_or<std::string>(attrs, "merge", op, "");
    auto m = find(merge_name);
    if (frame < 0 || m == nullptr || m->def->role != op_role::merge_values ||
        node_frame_[static_cast<size_t>(m->id)] != frame || !m->attrs.count("frame"))
      fail(op, "node '" + name + "' is a next_iteration that feeds no loop merge of its frame ('" +
                   merge_name + "')");
  }
  if (def.role == op_role::merge_values && attrs.count("frame") &&
      (frame < 0 ||
       frames_[static_cast<size_t>(frame)].name != get_attr<std::string>(attrs, "frame", op)))
    fail(op,
         "node '" + name + "' is a loop merge whose input does not come from an enter of its loop");
  return frame;
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
    constants.push_back(constant_value(e.node));
  }
  for (int c : control_inputs)
    if (c < 0 || c >= id)
      fail(op, "node '" + name + "' control input names node " + std::to_string(c) +
                   ", which is not an earlier node");
  if (def.acts_on_resource() &&
      (inputs.empty() || nodes_[static_cast<size_t>(inputs[0].node)].op != def.resource_op()))
    fail(op, "node '" + name + "': input 0 must be a " + def.resource_op());
  int frame = structural_frame(op, inputs, control_inputs, attrs, name);
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
    throw error(std::string(e.what()) + " (node '" + name + "', inputs: " + shapes + ")", e.code());
  }
  by_name_.emplace(name, id);
  nodes_.push_back(std::move(n));
  node_frame_.push_back(frame);
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

void graph::add_to_collection(const std::string& key, const operation& op) {
  if (&op.owner() != this) fail("graph", "add_to_collection '" + key + "': an op of another graph");
  collections_[key].push_back(op.id());
}

std::vector<operation> graph::collection(const std::string& key) {
  std::vector<operation> ops;
  auto it = collections_.find(key);
  if (it != collections_.end())
    for (int id : it->second) ops.emplace_back(this, id);
  return ops;
}

graph::scope_guard graph::colocate_with(const operation& op) {
  if (&op.owner() != this) fail("graph", "colocate_with an op of another graph");
  colocations_.push_back(op.name());
  return scope_guard(&colocations_);
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
