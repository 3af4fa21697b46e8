// The gradient of a while loop, as in TensorFlow's design: a backward loop
// runs as many iterations as the forward one ran (its exit says how many),
// in reverse, applying the body's gradient at each. The forward values the
// body's gradient needs are saved per iteration by history_push nodes in
// the forward loop and read back by history_read nodes in the backward
// loop, keyed by the iterations of every frame they live in; a value read
// by its own loop's gradient is let go of as it is read.
#include <algorithm>
#include <map>
#include <tuple>

#include "core/gradients.hpp"
#include "ops/array.hpp"
#include "ops/control_flow.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/op_util.hpp"
#include "ops/state.hpp"
#include "ops/tensor_array.hpp"

namespace actorflow {

namespace {

// One loop's nodes, per loop variable in order.
struct loop_parts {
  std::vector<int> enters, merges, switches, results,
      exits;                    // the body's inputs: switches' output 1
  std::vector<int> invariants;  // enters of loop invariants
};

loop_parts find_parts(const graph& g, int frame) {
  loop_parts p;  // results: the body's values, which its next_iterations take
  std::map<std::string, int> var_of_merge;
  for (auto& n : g.nodes()) {
    if (n.def->role == op_role::exit_frame && g.frame_of(n.inputs[0].node) == frame)
      p.exits.push_back(n.id);
    if (g.frame_of(n.id) != frame) continue;
    if (n.def->role == op_role::enter_frame)
      (is_loop_invariant(n) ? p.invariants : p.enters).push_back(n.id);
    if (n.def->role == op_role::merge_values && n.attrs.count("frame")) {
      var_of_merge[n.name] = int(p.merges.size());
      p.merges.push_back(n.id);
    }
    if (n.def->role == op_role::switch_value && n.attrs.count("frame")) p.switches.push_back(n.id);
  }
  p.results.assign(p.merges.size(), -1);
  for (auto& n : g.nodes())
    if (n.def->role == op_role::next_iteration && g.frame_of(n.id) == frame)
      p.results[size_t(var_of_merge.at(get_attr<std::string>(n.attrs, "merge", n.op)))] =
          n.inputs[0].node;
  auto& name = g.loop_frames()[size_t(frame)].name;
  if (p.enters.size() != p.merges.size() || p.switches.size() != p.merges.size() ||
      p.exits.size() != p.merges.size())
    fail("gradients", "loop '" + name + "' is not shaped as while_loop builds loops");
  return p;
}

// Where the backward loop of each forward frame stands while it is built:
// the forward iteration its body works on, and the backward frame.
struct backward_frame {
  output forward_iteration;
  int frame = -1;
};
thread_local std::map<int, backward_frame> backward_of;
thread_local std::map<std::pair<int, int>, std::string> saved;  // endpoint -> history
thread_local std::map<std::tuple<int, int, int>, output>
    read_in_frame;  // (endpoint, frame) -> read

std::string free_name(const graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 1; g.find(name) != nullptr; ++k) name = base + "_" + std::to_string(k);
  return name;
}

// The history that saves forward value `e` per iteration: a push in e's frame.
std::string history_of(graph& g, const endpoint& e) {
  auto key = std::make_pair(e.node, e.index);
  if (auto it = saved.find(key); it != saved.end()) return it->second;
  const node& n = g.at(e.node);
  // The push's name, unique in the graph, names the history too.
  std::string name = free_name(g, "history/" + n.name + "_" + std::to_string(e.index));
  std::string device = n.device;
  g.add_node_raw("history_push", {e}, {}, {{"history", name}}, name, device);
  saved[key] = name;
  return name;
}

// A forward loop's value, as the backward loop being built sees it.
endpoint resolve(graph& g, const endpoint& e, int current) {
  const node& n = g.at(e.node);
  if (is_loop_invariant(n)) {  // the same in every iteration: the value that entered
    endpoint in = n.inputs[0];
    if (g.frame_within(current, g.frame_of(in.node))) return in;
    return resolve(g, in, current);
  }
  int f = g.frame_of(e.node);
  auto& frames = g.loop_frames();
  std::vector<output> indices;
  for (int x = f; x >= 0; x = frames[size_t(x)].parent) {
    auto it = backward_of.find(x);
    if (it == backward_of.end())
      fail("gradients", "the gradient needs '" + n.name + "' of loop '" + frames[size_t(f)].name +
                            "' outside that loop's gradient");
    indices.insert(indices.begin(), it->second.forward_iteration);
  }
  auto key = std::make_tuple(e.node, e.index, current);
  if (auto it = read_in_frame.find(key); it != read_in_frame.end()) return it->second.ref();
  auto history = history_of(g, e);
  const tensor_spec spec = g.at(e.node).outputs[size_t(e.index)];
  std::vector<int64_t> dims(spec.dims.dims().begin(), spec.dims.dims().end());
  auto device = g.device_scope(g.at(e.node).device);
  auto read = make_op("history_read", indices,
                      {{"history", history},
                       {"type", spec.type},
                       {"dims", dims},
                       {"pop", current == backward_of.at(f).frame}},
                      "history_read");
  read_in_frame[key] = read;
  return read.ref();
}

// Per invariant: the tensor_array_read nodes that are its only consumers in
// the loop (it is a tensor array's data read one row per iteration), or
// none. Such an invariant's gradient adds each iteration's row into its
// accumulator in place, instead of a whole array of zeros with the row in it.
std::vector<std::vector<int>> row_reads(const graph& g, const std::vector<int>& invariants) {
  std::vector<std::vector<int>> rows(invariants.size());
  for (size_t j = 0; j < invariants.size(); ++j) {
    bool only_reads = true;
    for (auto& n : g.nodes())
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i].node != invariants[j]) continue;
        if (n.op == "tensor_array_read" && i == 0 && n.inputs[2].node != invariants[j] &&
            g.at(n.inputs[2].node).outputs[size_t(n.inputs[2].index)].dims.rank() == 0)
          rows[j].push_back(n.id);
        else
          only_reads = false;
      }
    if (!only_reads) rows[j].clear();
  }
  return rows;
}

// Per invariant: the matmuls of the loop's own frame that are all its
// consumers, each taking it as the right operand of a x w or a x w^T (rank 2,
// static non-empty shapes), or none. Such an invariant's gradient, the sum
// over iterations of a_t^T dy_t, is one product after the backward loop over
// every iteration's a and dy, gathered into two tensor arrays: one large
// product instead of one per iteration with the batch as its inner dim, and
// no accumulator to zero-fill and add to per iteration (in an LSTM, the
// recurrent kernel's gradient).
std::vector<std::vector<int>> matmul_uses(const graph& g, int frame,
                                          const std::vector<int>& invariants) {
  auto static_matrix = [](const shape& s) {
    return s.rank() == 2 && s.is_fully_defined() && s.num_elements() > 0;
  };
  std::vector<std::vector<int>> uses(invariants.size());
  for (size_t j = 0; j < invariants.size(); ++j) {
    bool only_matmuls = static_matrix(g.at(invariants[j]).outputs[0].dims);
    for (auto& n : g.nodes())
      for (size_t i = 0; i < n.inputs.size() && only_matmuls; ++i) {
        if (n.inputs[i].node != invariants[j]) continue;
        const endpoint& a = n.inputs[0];
        only_matmuls = n.op == "matmul" && i == 1 && a.node != invariants[j] &&
                       g.frame_of(n.id) == frame &&
                       !get_attr_or<bool>(n.attrs, "transpose_a", n.op, false) &&
                       static_matrix(g.at(a.node).outputs[size_t(a.index)].dims) &&
                       static_matrix(n.outputs[0].dims);
        if (only_matmuls) uses[j].push_back(n.id);
      }
    if (!only_matmuls) uses[j].clear();
  }
  return uses;
}

// How the backward loop sums an invariant's gradient: added per iteration to
// an accumulator (a whole tensor, or the rows a tensor array read took), or
// gathered for products after the loop (matmul_uses).
struct invariant_sum {
  endpoint outside;  // the value whose gradient this is
  endpoint inside;   // the body's view of it: its enter, or a constant itself
  std::vector<int> row_reads, matmuls;
  size_t first_x = 0;    // where its xs start in the body's gradients() call
  size_t first_var = 0;  // where its loop variables start in the backward loop
};

// The two arrays a matmul's gradient gathers: its left operand and the gradient of its output,
// one row per forward iteration (dynamic: the count is known when the loop has run).
std::pair<tensor_array, tensor_array> product_arrays(graph& g, int product) {
  // Copies: making the arrays adds nodes, which may move the graph's node storage.
  const node& m = g.at(product);
  const tensor_spec a = g.at(m.inputs[0].node).outputs[size_t(m.inputs[0].index)];
  const tensor_spec y = m.outputs[0];
  const std::string name = m.name;
  return {make_tensor_array(g, a.type, 0, a.dims, true, name + "/grad_lhs"),
          make_tensor_array(g, y.type, 0, y.dims, true, name + "/grad_dy")};
}

// The sum over iterations of a matmul's gradient for its right operand, from the two arrays.
output product_of_arrays(graph& g, int product, const tensor_array& a, const tensor_array& dy) {
  const node& m = g.at(product);
  bool tb = get_attr_or<bool>(m.attrs, "transpose_b", m.op, false);
  int64_t k = a.element_shape().dim(1), n = dy.element_shape().dim(1);
  auto lhs = reshape(a.stack(), {-1, k});
  auto grad = reshape(dy.stack(), {-1, n});
  return tb ? matmul(grad, lhs, true, false) : matmul(lhs, grad, true, false);
}

// Constants the loop's nodes (its nested loops' too) read directly, whose
// gradient is asked for: folded into their readers, they enter through no
// enter, so the backward loop sums their gradient as an invariant's.
std::vector<int> constants_read(const graph& g, int frame, const std::vector<char>& between) {
  std::vector<int> found;
  for (size_t id = 0; id < between.size(); ++id) {
    const node& n = g.at(int(id));
    if (!g.frame_within(g.frame_of(n.id), frame)) continue;
    for (auto& in : n.inputs) {
      const node& src = g.at(in.node);
      if (is_foldable_constant(src) && between[size_t(src.id)] &&
          is_differentiable_type(src.outputs[0].type) &&
          std::find(found.begin(), found.end(), src.id) == found.end())
        found.push_back(src.id);
    }
  }
  return found;
}

std::vector<std::pair<endpoint, output>> loop_gradient(graph& g, int frame,
                                                       const std::map<int, output>& exit_grads,
                                                       const std::vector<char>& between) {
  auto p = find_parts(g, frame);
  auto& name = g.loop_frames()[size_t(frame)].name;
  auto out = [&](int id, int index = 0) { return output(&g, {id, index}); };
  std::vector<size_t> vars;  // the loop variables gradients flow through
  for (size_t i = 0; i < p.merges.size(); ++i)
    if (is_differentiable_type(out(p.merges[i]).type())) vars.push_back(i);
  std::vector<int> invariants;
  for (int inv : p.invariants) {
    endpoint in = g.at(inv).inputs[0];
    if (is_differentiable_type(out(inv).type()) && between[size_t(in.node)])
      invariants.push_back(inv);
  }
  auto constants = constants_read(g, frame, between);
  std::vector<output> init{out(p.exits[0], 1)};
  std::vector<shape> shapes{shape{}};
  for (size_t i : vars) {
    auto it = exit_grads.find(p.exits[i]);
    init.push_back(it != exit_grads.end() ? it->second : zeros_like(out(p.exits[i])));
    shapes.push_back(out(p.merges[i]).dims());
  }
  auto rows = row_reads(g, invariants);
  auto matmuls = matmul_uses(g, frame, invariants);
  std::vector<invariant_sum> sums(invariants.size() + constants.size());
  for (size_t j = 0; j < sums.size(); ++j) {
    bool entered = j < invariants.size();
    sums[j].inside =
        entered ? endpoint{invariants[j], 0} : endpoint{constants[j - invariants.size()], 0};
    sums[j].outside = entered ? g.at(invariants[j]).inputs[0] : sums[j].inside;
  }
  std::map<int, std::pair<tensor_array, tensor_array>> arrays;  // per matmul
  for (size_t j = 0; j < sums.size(); ++j) {
    auto& s = sums[j];
    s.first_var = init.size();
    if (j >= invariants.size()) {  // a constant: summed whole
      init.push_back(zeros_like(output(&g, s.outside)));
      shapes.push_back(init.back().dims());
      continue;
    }
    if (!matmuls[j].empty()) {
      s.matmuls = matmuls[j];
      for (int m : s.matmuls) {
        auto pair = arrays[m] = product_arrays(g, m);
        for (auto* arr : {&pair.first, &pair.second}) {
          init.insert(init.end(), {arr->data, arr->written});
          shapes.push_back(arr->data.dims());
          shapes.back()[0] = shape::unknown;
          shapes.push_back(shape{shape::unknown});
        }
      }
      continue;
    }
    s.row_reads = rows[j];
    init.push_back(zeros_like(output(&g, s.outside)));
    shapes.push_back(init.back().dims());
  }
  auto resolver = g.frame_resolver_scope(
      [&g](const endpoint& e, int current) { return resolve(g, e, current); });
  auto body = [&](const std::vector<output>& v) {
    auto iteration = v[0] - scalar<int64_t>(g, 1);
    backward_of[frame] = {iteration, g.current_frame()};
    std::vector<output> ys, grad_ys, xs;
    for (size_t j = 0; j < vars.size(); ++j) {
      ys.push_back(out(p.results[vars[j]]));
      grad_ys.push_back(v[1 + j]);
      xs.push_back(out(p.switches[vars[j]], 1));
    }
    for (auto& s : sums) {
      s.first_x = xs.size();
      for (int m : s.matmuls) xs.push_back(out(m));
      if (s.matmuls.empty() && s.row_reads.empty()) xs.push_back(output(&g, s.inside));
      for (int read : s.row_reads) xs.push_back(out(read));
    }
    auto grads = ys.empty() ? std::vector<output>(xs.size()) : gradients(ys, xs, grad_ys);
    std::vector<output> next{iteration};
    for (size_t j = 0; j < vars.size(); ++j)
      next.push_back(grads[j].valid() ? grads[j] : zeros_like(v[1 + j]));
    for (auto& s : sums) {
      size_t at = s.first_var;
      for (size_t r = 0; r < s.matmuls.size(); ++r, at += 4) {
        int m = s.matmuls[r];
        auto& [lhs, dy] = arrays.at(m);
        auto& grad = grads[s.first_x + r];
        auto lhs_written =
            lhs.with(v[at], v[at + 1]).write(iteration, output(&g, g.at(m).inputs[0]));
        auto dy_written = dy.with(v[at + 2], v[at + 3])
                              .write(iteration, grad.valid() ? grad : zeros_like(out(m)));
        next.insert(next.end(),
                    {lhs_written.data, lhs_written.written, dy_written.data, dy_written.written});
      }
      if (!s.matmuls.empty()) continue;
      output acc = v[at];
      if (s.row_reads.empty()) {
        auto& grad = grads[s.first_x];
        next.push_back(grad.valid() ? acc + grad : identity(acc));
        continue;
      }
      for (size_t r = 0; r < s.row_reads.size(); ++r)
        if (auto& grad = grads[s.first_x + r]; grad.valid())
          acc = scatter_add_into(acc, grad, output(&g, g.at(s.row_reads[r]).inputs[2]));
      next.push_back(g.fires_every_iteration(acc) ? acc : identity(acc));
    }
    return next;
  };
  std::vector<output> backward;
  // The caches name nodes of this graph: gone with the outermost loop's gradient.
  auto done = [frame] {
    backward_of.erase(frame);
    if (!backward_of.empty()) return;
    saved.clear();
    read_in_frame.clear();
  };
  try {
    backward = while_loop(
        [&](const std::vector<output>& v) { return greater(v[0], scalar<int64_t>(g, 0)); }, body,
        init, {.shape_invariants = shapes, .name = name + "_grad"});
  } catch (...) {
    done();
    throw;
  }
  done();
  std::vector<std::pair<endpoint, output>> result;
  for (size_t j = 0; j < vars.size(); ++j) {
    endpoint in = g.at(p.enters[vars[j]]).inputs[0];
    if (between[size_t(in.node)]) result.emplace_back(in, backward[1 + j]);
  }
  for (auto& s : sums) {
    endpoint in = s.outside;
    if (s.matmuls.empty()) {
      result.emplace_back(in, backward[s.first_var]);
      continue;
    }
    size_t at = s.first_var;
    for (int m : s.matmuls) {
      auto& [lhs, dy] = arrays.at(m);
      result.emplace_back(in, product_of_arrays(g, m, lhs.with(backward[at], backward[at + 1]),
                                                dy.with(backward[at + 2], backward[at + 3])));
      at += 4;
    }
  }
  return result;
}

const bool registered = [] {
  register_loop_gradient(loop_gradient);
  return true;
}();

}  // namespace

}  // namespace actorflow
