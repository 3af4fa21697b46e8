#include "core/gradients.hpp"

#include <map>

namespace actorflow {

namespace {

const char* const kOp = "gradients";

// The driver adds nodes by op name: the ops themselves live in ops/.
output add_op(const std::string& op, std::vector<output> inputs) {
  graph& g = inputs[0].owner();
  return output(&g, {g.add_node(op, std::move(inputs)).id, 0});
}

struct endpoint_less {
  bool operator()(const endpoint& a, const endpoint& b) const {
    return a.node != b.node ? a.node < b.node : a.index < b.index;
  }
};
using grad_map = std::map<endpoint, std::vector<output>, endpoint_less>;

// A loop merge's back edge: its next_iteration names it in an attribute
// (the graph stays in topological order), so the sweeps below follow it by hand.
// The loops whose gradient is being built (innermost last): inside one,
// gradients() differentiates one iteration of its body, so its back edges
// (and those of the loops around it) do not count.
thread_local std::vector<int> loops_in_progress;

std::map<int, int> back_edges(const graph& g) {
  std::map<int, int> next_of_merge;
  for (auto& n : g.nodes()) {
    if (n.def->role != op_role::next_iteration) continue;
    auto m = g.find(get_attr_or<std::string>(n.attrs, "merge", n.op, ""));
    if (m == nullptr) continue;
    bool in_progress = false;
    for (int f : loops_in_progress) in_progress |= g.frame_of(m->id) == f;
    if (!in_progress) next_of_merge[m->id] = n.id;
  }
  return next_of_merge;
}

// Nodes on a path from some x to some y: only they take part in the backward
// pass. Nodes are in topological order, so one sweep each way suffices, but
// for loops: their back edges point backwards, so the sweeps repeat until
// nothing changes (once more per loop nesting level).
std::vector<char> nodes_between(const graph& g, const std::vector<output>& ys,
                                const std::vector<output>& xs) {
  const auto& nodes = g.nodes();
  auto back = back_edges(g);
  std::vector<char> from_x(nodes.size(), 0), to_y(nodes.size(), 0);
  for (auto& x : xs) from_x[size_t(x.ref().node)] = 1;
  for (auto& y : ys) to_y[size_t(y.ref().node)] = 1;
  for (bool changed = true; changed;) {
    changed = false;
    auto mark = [&](std::vector<char>& set, size_t id) {
      if (set[id]) return;
      set[id] = 1;
      changed = true;
    };
    for (auto& n : nodes) {
      for (auto& in : n.inputs)
        if (from_x[size_t(in.node)]) mark(from_x, size_t(n.id));
      if (auto b = back.find(n.id); b != back.end() && from_x[size_t(b->second)])
        mark(from_x, size_t(n.id));
    }
    for (size_t id = nodes.size(); id-- > 0;) {
      if (!to_y[id]) continue;
      for (auto& in : nodes[id].inputs) mark(to_y, size_t(in.node));
      if (auto b = back.find(int(id)); b != back.end()) mark(to_y, size_t(b->second));
    }
  }
  std::vector<char> between(nodes.size(), 0);
  for (size_t id = 0; id < nodes.size(); ++id) between[id] = from_x[id] && to_y[id];
  return between;
}

output sum_all(const std::vector<output>& terms) {
  output total = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) total = add_op("add", {total, terms[i]});
  return total;
}

void check_input_grad(const grad_context& ctx, size_t i, const output& grad) {
  auto& want = ctx.inputs[i].spec();
  auto& got = grad.spec();
  if (got.type != want.type || !got.dims.compatible_with(want.dims))
    fail(kOp, "the gradient of op '" + ctx.op + "' (node '" + ctx.node_name + "') for input " +
                  std::to_string(i) + " is " + got.to_string() + " but the input is " +
                  want.to_string());
}

// Runs one node's gradient function and queues what it returns for its inputs.
void backprop_node(graph& g, const node& n, std::vector<output> out_grads,
                   const std::vector<char>& between, grad_map& pending) {
  const op_def& def = *n.def;
  if (!def.gradient) {
    std::string why = def.not_differentiable ? "is not differentiable" : "has no gradient";
    fail(kOp, "op '" + n.op + "' (node '" + n.name + "') " + why +
                  ", but it lies on the path from an x to a y");
  }
  grad_context ctx{g, n.id, n.op, n.name, n.attrs, {}, {}, {}, {}};
  for (size_t i = 0; i < n.inputs.size(); ++i) ctx.inputs.emplace_back(&g, n.inputs[i]);
  for (size_t i = 0; i < n.outputs.size(); ++i)
    ctx.outputs.emplace_back(&g, endpoint{n.id, int(i)});
  // n may move from here on: adding nodes may move the graph's node storage.
  std::string node_name = n.name, node_device = n.device;
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    if (!out_grads[i].valid() && is_differentiable_type(ctx.outputs[i].type()))
      out_grads[i] = add_op("zeros_like", {ctx.outputs[i]});
  ctx.grads = std::move(out_grads);
  ctx.input_grads.resize(ctx.inputs.size());
  auto scope = g.name_scope("gradients/" + node_name);
  // A node's gradient runs where the node runs (TensorFlow's
  // colocate_gradients_with_ops): the gradient of a gather on a parameter
  // server stays there, so only the gathered rows cross the network.
  auto device = g.device_scope(node_device);
  def.gradient(ctx);
  for (size_t i = 0; i < ctx.inputs.size() && i < ctx.input_grads.size(); ++i) {
    auto& grad = ctx.input_grads[i];
    auto& in = ctx.inputs[i];
    if (!grad.valid() || !between[size_t(in.ref().node)] || !is_differentiable_type(in.type()))
      continue;
    check_input_grad(ctx, i, grad);
    pending[in.ref()].push_back(grad);
  }
}

loop_gradient_builder& loop_builder() {
  static loop_gradient_builder builder;
  return builder;
}

// The frame an exit leaves: its input's.
int frame_left_by(const graph& g, const node& exit) { return g.frame_of(exit.inputs[0].node); }

// A loop's gradient, built as a whole when the walk reaches the loop's last
// exit: every exit's gradient is complete then (their consumers all come
// later). Marks the loop's nodes, which the walk then skips.
void backprop_loop(graph& g, int frame, const std::vector<char>& between, grad_map& pending,
                   std::map<endpoint, output, endpoint_less>& done, std::vector<char>& skip) {
  if (!loop_builder())
    fail(kOp, "no builder for loop gradients is registered (ops/control_flow.cpp)");
  std::vector<int> exits;
  for (size_t id = 0; id < skip.size(); ++id) {
    const node& n = g.at(int(id));
    bool leaves = n.def->role == op_role::exit_frame && frame_left_by(g, n) == frame;
    if (leaves) exits.push_back(n.id);
    if (leaves || g.frame_within(g.frame_of(n.id), frame)) skip[id] = 1;
  }
  std::map<int, output> exit_grads;  // sum_all adds nodes: no node references held here
  for (int id : exits) {
    auto it = pending.find(endpoint{id, 0});
    if (it == pending.end()) continue;
    exit_grads[id] = sum_all(it->second);
    done[it->first] = exit_grads[id];
  }
  loops_in_progress.push_back(frame);
  std::vector<std::pair<endpoint, output>> entered;
  try {
    entered = loop_builder()(g, frame, exit_grads, between);
  } catch (...) {
    loops_in_progress.pop_back();
    throw;
  }
  loops_in_progress.pop_back();
  for (auto& [to, grad] : entered) pending[to].push_back(grad);
}

}  // namespace

void register_loop_gradient(loop_gradient_builder builder) { loop_builder() = std::move(builder); }

bool is_differentiable_type(dtype type) { return is_floating(type); }

std::vector<output> gradients(const std::vector<output>& ys, const std::vector<output>& xs,
                              const std::vector<output>& grad_ys) {
  if (ys.empty()) fail(kOp, "no ys to differentiate");
  if (!grad_ys.empty() && grad_ys.size() != ys.size())
    fail(kOp, std::to_string(grad_ys.size()) + " grad_ys for " + std::to_string(ys.size()) + " ys");
  graph& g = ys[0].owner();
  for (auto& t : ys)
    if (&t.owner() != &g) fail(kOp, "ys come from different graphs");
  for (auto& t : xs)
    if (&t.owner() != &g) fail(kOp, "x '" + t.name() + "' is from another graph than the ys");
  for (auto& y : ys)
    if (!is_differentiable_type(y.type()))
      fail(kOp, "y '" + y.name() + "' is " + y.spec().to_string() +
                    "; only float tensors have gradients");

  auto between = nodes_between(g, ys, xs);
  grad_map pending;
  for (size_t i = 0; i < ys.size(); ++i) {
    auto seed = grad_ys.empty() ? add_op("ones_like", {ys[i]}) : grad_ys[i];
    if (seed.type() != ys[i].type())
      fail(kOp, "grad_ys[" + std::to_string(i) + "] is " + seed.spec().to_string() + " but y '" +
                    ys[i].name() + "' is " + ys[i].spec().to_string());
    pending[ys[i].ref()].push_back(seed);
  }

  std::map<endpoint, output, endpoint_less> done;  // the summed gradient of each endpoint reached
  // Nodes added from here on (seeds, gradients) are not between any x and y.
  int last = int(between.size()) - 1;
  std::vector<char> skip(between.size(), 0);  // nodes of loops whose gradient is built
  for (int id = last; id >= 0; --id) {
    if (!between[size_t(id)] || skip[size_t(id)]) continue;
    if (g.at(id).def->role == op_role::exit_frame) {
      backprop_loop(g, frame_left_by(g, g.at(id)), between, pending, done, skip);
      continue;
    }
    // Read the node before summing: sum_all adds nodes, which may move the
    // graph's node storage under a reference.
    size_t num_outputs = g.at(id).outputs.size();
    bool has_input_between = false;
    for (auto& in : g.at(id).inputs) has_input_between |= bool(between[size_t(in.node)]);
    std::vector<output> out_grads(num_outputs);
    bool any = false;
    // The terms of a node's gradient are summed where its gradient is built, on the node's
    // device (TensorFlow sums them inside colocate_gradients_with_ops too): a [batch, classes]
    // logits gradient on a parameter server then never leaves it to be summed. An x where the
    // walk stops keeps its sum where the caller builds the gradients: a variable several ops
    // of a worker read gets one summed gradient from the worker, not one term per reader.
    const std::string sum_device = has_input_between ? g.at(id).device : "";
    auto summed_on = g.device_scope(sum_device);
    for (size_t i = 0; i < num_outputs; ++i) {
      auto it = pending.find(endpoint{id, int(i)});
      if (it == pending.end()) continue;
      out_grads[i] = sum_all(it->second);
      done[it->first] = out_grads[i];
      any = true;
    }
    // An x with no x upstream of it is where the backward pass stops.
    if (!any || !has_input_between) continue;
    backprop_node(g, g.at(id), std::move(out_grads), between, pending);
  }

  std::vector<output> result;
  for (auto& x : xs) {
    auto it = done.find(x.ref());
    result.push_back(it == done.end() ? output() : it->second);
  }
  return result;
}

}  // namespace actorflow
