#include "actors/compile/graph_optimizer.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "actors/compile/placement.hpp"
#include "core/device_name.hpp"
#include "ops/elementwise.hpp"
#include "ops/normalization.hpp"

namespace actorflow {

namespace {

// Inputs read only for their shape (their values never matter).
bool reads_only_shape(const std::string& op, size_t input) {
  if (op == "ones_like" || op == "zeros_like" || op == "shape" || op == "size") return input == 0;
  return op == "broadcast_like" && input == 1;
}

bool is_pass_through(const node& n, const graph& g) {
  if (n.op == "identity" || n.op == "stop_gradient") return true;
  if (n.op != "reshape" || n.inputs.empty()) return false;
  auto& in = g.at(n.inputs[0].node).outputs[static_cast<size_t>(n.inputs[0].index)].dims;
  return in.is_fully_defined() && in == n.outputs[0].dims;
}

// Ops whose node may be folded or deduplicated: computations, not effects.
bool is_pure(const node& n) {
  return n.def->kernel && !n.def->stateful && !n.def->served_by_runtime() && !n.outputs.empty() &&
         n.def->role != op_role::constant;
}

// Largest tensor attribute whose bytes are compared for deduplication.
constexpr size_t max_compared_bytes = size_t{1} << 20;

bool has_large_tensor(const attr_map& attrs) {
  for (auto& [name, value] : attrs)
    if (auto* t = std::get_if<tensor>(&value); t && t->size_bytes() > max_compared_bytes)
      return true;
  return false;
}

// Nodes that one equal earlier node may replace: computations and constants.
bool is_deduplicable(const node& n) {
  return (is_pure(n) || is_foldable_constant(n)) && !has_large_tensor(n.attrs);
}

// An empty tensor may have no buffer at all: memcmp must not see its null.
bool same_tensor(const tensor& a, const tensor& b) {
  return a.type() == b.type() && a.dims() == b.dims() &&
         (a.size_bytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.size_bytes()) == 0);
}

bool same_attrs(const attr_map& a, const attr_map& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first || ia->second.index() != ib->second.index()) return false;
    bool same = std::visit(
        [&](auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, tensor>)
            return same_tensor(x, std::get<tensor>(ib->second));
          else
            return x == std::get<T>(ib->second);
        },
        ia->second);
    if (!same) return false;
  }
  return true;
}

std::string endpoint_key(const endpoint& e) {
  return std::to_string(e.node) + ":" + std::to_string(e.index);
}

// One planned fusion: the product (matmul or conv2d), its bias_add, and the
// relu after it (or none); the last of them is the head, where the fused
// node is made.
struct fusion {
  int product = -1, bias = -1, relu = -1;
  int head() const { return relu >= 0 ? relu : bias; }
};

// One planned fold of an inference-mode batch norm into the convolution
// before it (its filter and statistics constants): the convolution, the
// batch norm and the relu after it (or none) become one fused_conv2d.
struct batch_norm_fold {
  int conv = -1, batch_norm = -1, relu = -1;
  int head() const { return relu >= 0 ? relu : batch_norm; }
};

class optimizer {
 public:
  optimizer(const graph& g, const run_signature& sig, const graph_optimizer_options& options)
      : in_(g), sig_(sig), options_(options), out_(std::make_unique<graph>()) {}

  optimized_graph run() {
    needed_ = needed_nodes(in_, sig_, false);
    prepare();
    if (options_.fuse) {
      mark_folding_values();
      plan_batch_norm_folds();
      plan_fusions();
      plan_update_fusions();
      plan_pool_relu_grads();
      plan_chains();
    }
    for (auto& n : in_.nodes()) copy(n);
    optimized_graph result;
    result.sig = mapped_signature();
    for (bool b : needed_) report_.nodes_before += b;
    for (bool b : needed_nodes(*out_, result.sig, false)) report_.nodes_after += b;
    result.g = std::move(out_);
    result.report = report_;
    return result;
  }

 private:
  const graph& in_;
  const run_signature& sig_;
  graph_optimizer_options options_;
  std::unique_ptr<graph> out_;
  graph_optimizer_report report_;
  std::vector<bool> needed_;
  // Per node of the input graph: readers of its outputs among the needed
  // nodes (one per edge), its last such reader, the needed nodes that wait on
  // it by control edge, and whether it must stay a node of its own (fed,
  // fetched, run as a target).
  std::vector<int> data_uses_, last_reader_;
  std::vector<std::vector<int>> control_readers_;
  std::vector<bool> kept_, will_fold_;
  std::vector<bool> may_be_dead_;         // by node: whether its outputs can be dead in a step
  std::vector<fusion> fusion_at_;         // by head; product < 0: none
  std::vector<batch_norm_fold> fold_at_;  // by head; conv < 0: none
  std::vector<int> product_of_update_;    // by apply_sgd/adam node: the matmul it takes; -1: none
  std::vector<int> pool_grad_of_;         // by relu_grad node: the max_pool_grad it masks; -1: none
  std::vector<bool> absorbed_;            // made part of a fused node (a layer's or a chain's)
  std::vector<std::vector<int>> chain_at_;  // by root: an element-wise chain's nodes, in order
  // Where each output (and each node, for control edges and targets) went.
  std::vector<std::vector<endpoint>> moved_;
  std::vector<int> moved_node_;
  std::map<std::string, std::vector<int>> by_key_;  // deduplication: key -> new nodes

  const node& at(int id) const { return in_.at(id); }
  static size_t index(int id) { return static_cast<size_t>(id); }

  // Sizes the per-node state and counts who reads what.
  void prepare() {
    const size_t n = in_.size();
    data_uses_.assign(n, 0);
    last_reader_.assign(n, -1);
    control_readers_.assign(n, {});
    kept_.assign(n, false);
    will_fold_.assign(n, false);
    fusion_at_.assign(n, fusion{});
    fold_at_.assign(n, batch_norm_fold{});
    product_of_update_.assign(n, -1);
    pool_grad_of_.assign(n, -1);
    absorbed_.assign(n, false);
    chain_at_.assign(n, {});
    moved_.assign(n, {});
    moved_node_.assign(n, -1);
    for (auto& node : in_.nodes()) {
      if (!needed_[index(node.id)]) continue;
      for (auto& e : node.inputs) {
        ++data_uses_[index(e.node)];
        last_reader_[index(e.node)] = node.id;
      }
      for (int c : node.control_inputs) control_readers_[index(c)].push_back(node.id);
    }
    for (auto& e : sig_.feeds) kept_[index(e.node)] = true;
    for (auto& e : sig_.fetches) kept_[index(e.node)] = true;
    for (int t : sig_.targets) kept_[index(t)] = true;
    find_dead_values();
  }

  // Which nodes may have dead outputs (a cond's untaken side): a node that
  // reads only the shape of such a value must stay a node, since a constant
  // would be live in every step. A merge of such values then takes the
  // constant as live, where the value it stood for was dead (the gradient of
  // a switch fills its untaken side with zeros_like of that side). Nodes are
  // in topological order but for loop back edges, which do not change
  // liveness: a loop's exits are dead exactly when what entered it was.
  void find_dead_values() {
    may_be_dead_.assign(in_.size(), false);
    std::vector<bool> frame_may_be_dead(in_.loop_frames().size(), false);
    for (auto& n : in_.nodes()) {
      bool any = false, all = !n.inputs.empty();
      for (auto& e : n.inputs) {
        any |= may_be_dead_[index(e.node)];
        all = all && may_be_dead_[index(e.node)];
      }
      for (int c : n.control_inputs) any |= may_be_dead_[index(c)];
      const int frame = in_.frame_of(n.id);
      bool dead = any;
      switch (n.def->role) {
        case op_role::switch_value:  // a cond's switch kills one side
          dead = frame == -1 || any;
          break;
        case op_role::recv:  // carries its send's liveness, unknown here
          dead = true;
          break;
        case op_role::merge_values:  // a cond's merge is live if one side is
          dead = frame == -1 ? all : any;
          break;
        case op_role::enter_frame:
          if (frame >= 0 && any) frame_may_be_dead[index(frame)] = true;
          break;
        case op_role::exit_frame: {
          const int left = in_.frame_of(n.inputs[0].node);
          dead = left >= 0 && frame_may_be_dead[index(left)];
          break;
        }
        default:
          break;
      }
      may_be_dead_[index(n.id)] = dead;
    }
  }

  // --- fusion ---

  // Whether node `id` may disappear into a fused node whose head is `head`:
  // its one reader is `reader`, it waits on nothing, it runs where the head does.
  bool absorbable(int id, int reader, int head) const {
    const node& n = at(id);
    if (kept_[index(id)] || data_uses_[index(id)] != 1 || last_reader_[index(id)] != reader ||
        !n.control_inputs.empty() || n.device != at(head).device)
      return false;
    // Nodes waiting on it will wait on the fused node: it must come before them.
    for (int r : control_readers_[index(id)])
      if (r < head) return false;
    return true;
  }

  // Whether fused op `op` may be made: every device of the run has its kernel.
  bool may_make(const char* op) const {
    return !options_.runs_everywhere || options_.runs_everywhere(op);
  }

  bool fusable_product(const node& p) const {
    if (p.op != "matmul" && p.op != "conv2d") return false;
    if (!may_make(p.op == "matmul" ? "fused_matmul" : "fused_conv2d")) return false;
    auto& out = p.outputs[0];
    if (out.type != dtype::float32 && out.type != dtype::float64) return false;
    if (p.op == "conv2d") return true;
    for (auto& e : p.inputs)
      if (at(e.node).outputs[index(e.index)].dims.rank() != 2) return false;
    return true;
  }

  void plan_fusions() {
    for (auto& b : in_.nodes()) {
      if (!needed_[index(b.id)] || b.op != "bias_add" || !b.control_inputs.empty()) continue;
      const node& p = at(b.inputs[0].node);
      if (!needed_[index(p.id)] || !fusable_product(p)) continue;
      fusion f{p.id, b.id, -1};
      const int reader = last_reader_[index(b.id)];
      if (reader >= 0 && at(reader).op == "relu" && at(reader).control_inputs.empty() &&
          absorbable(b.id, reader, reader) && absorbable(p.id, b.id, reader))
        f.relu = reader;
      else if (!absorbable(p.id, b.id, b.id))
        continue;
      fusion_at_[index(f.head())] = f;
      absorbed_[index(p.id)] = true;
      if (f.relu >= 0) absorbed_[index(b.id)] = true;
    }
  }

  // An inference-mode fused_batch_norm of a conv2d's output folds into the
  // convolution where the filter and the four statistics fold to constants
  // (an exported model, whose variables were frozen) and nothing but its
  // relu, or a reader of y, reads the batch norm's outputs.
  void plan_batch_norm_folds() {
    if (!may_make("fused_conv2d")) return;
    std::vector<bool> reads_statistics(in_.size(), false);
    for (auto& n : in_.nodes())
      if (needed_[index(n.id)])
        for (auto& e : n.inputs)
          if (e.index != 0) reads_statistics[index(e.node)] = true;
    for (auto& n : in_.nodes()) {
      if (!needed_[index(n.id)] || n.op != "fused_batch_norm" || in_.frame_of(n.id) != -1 ||
          get_attr_or<bool>(n.attrs, "is_training", n.op, true) || reads_statistics[index(n.id)] ||
          kept_[index(n.id)] || !n.control_inputs.empty())
        continue;
      const node& conv = at(n.inputs[0].node);
      if (conv.op != "conv2d" || !needed_[index(conv.id)] || !fusable_product(conv) ||
          !will_fold_[index(conv.inputs[1].node)])
        continue;
      bool constants = true;
      for (size_t i = 1; i < 5; ++i) constants = constants && will_fold_[index(n.inputs[i].node)];
      if (!constants) continue;
      batch_norm_fold f{conv.id, n.id, -1};
      const int reader = last_reader_[index(n.id)];
      if (reader >= 0 && at(reader).op == "relu" && at(reader).control_inputs.empty() &&
          absorbable(n.id, reader, reader) && absorbable(conv.id, n.id, reader))
        f.relu = reader;
      else if (!absorbable(conv.id, n.id, n.id))
        continue;
      fold_at_[index(f.head())] = f;
      absorbed_[index(conv.id)] = true;
      if (f.relu >= 0) absorbed_[index(n.id)] = true;
    }
  }

  // Element-wise chains: from each root (latest first), the element-wise
  // nodes of its shape that feed only it and each other become one
  // fused_elementwise (ops/elementwise.hpp). Values that will fold stay out.
  bool chainable(const node& n, const node& root) const {
    if (!is_fusable_elementwise(n.op) || !n.control_inputs.empty() || n.device != root.device ||
        n.outputs[0].type != dtype::float32 || !(n.outputs[0].dims == root.outputs[0].dims) ||
        !n.outputs[0].dims.is_fully_defined() || absorbed_[index(n.id)] ||
        fusion_at_[index(n.id)].product >= 0 || fold_at_[index(n.id)].conv >= 0 ||
        pool_grad_of_[index(n.id)] >= 0 || will_fold_[index(n.id)])
      return false;
    for (auto& e : n.inputs)  // equal shapes only: no broadcasting inside a chain
      if (!(at(e.node).outputs[index(e.index)].dims == n.outputs[0].dims)) return false;
    return true;
  }

  void plan_chains() {
    if (!may_make("fused_elementwise")) return;
    for (int id = int(in_.size()) - 1; id >= 0; --id) {
      const node& root = at(id);
      if (!needed_[index(id)] || !chainable(root, root)) continue;
      std::vector<int> members{id}, pending{id};
      while (!pending.empty()) {
        const node& n = at(pending.back());
        pending.pop_back();
        for (auto& e : n.inputs)
          if (chainable(at(e.node), root) && absorbable(e.node, n.id, id) &&
              std::find(members.begin(), members.end(), e.node) == members.end()) {
            members.push_back(e.node);
            pending.push_back(e.node);
          }
      }
      if (members.size() < 2) continue;
      std::sort(members.begin(), members.end());
      for (int m : members) absorbed_[index(m)] = m != id;
      chain_at_[index(id)] = std::move(members);
    }
  }

  // Nodes the folding pass will try to turn into constants (fold() may still
  // find a value too large): fusing them would keep them computing every step;
  // folding a batch norm into its convolution needs them constant. Once, before the plans.
  void mark_folding_values() {
    for (auto& n : in_.nodes()) {
      bool constant = is_foldable_constant(n) || may_fold(n);
      for (size_t i = 0; i < n.inputs.size() && constant; ++i)
        constant = will_fold_[index(n.inputs[i].node)] ||
                   (reads_only_shape(n.op, i) &&
                    at(n.inputs[i].node).outputs[index(n.inputs[i].index)].dims.is_fully_defined());
      will_fold_[index(n.id)] = constant;
    }
  }

  void emit_chain(const node& root, const std::vector<int>& members) {
    std::vector<endpoint> inputs;  // from outside the chain, each once
    auto input_ref = [&](const endpoint& e) -> int64_t {
      auto m = std::find(members.begin(), members.end(), e.node);
      if (m != members.end()) return -1;
      auto moved_e = moved(e);
      auto it = std::find(inputs.begin(), inputs.end(), moved_e);
      if (it != inputs.end()) return it - inputs.begin();
      inputs.push_back(moved_e);
      return int64_t(inputs.size()) - 1;
    };
    for (int m : members)
      for (auto& e : at(m).inputs) input_ref(e);
    std::string ops;
    std::vector<int64_t> operands;
    for (int m : members) {
      const node& n = at(m);
      ops += (ops.empty() ? "" : ",") + n.op;
      for (size_t i = 0; i < 2; ++i) {
        if (i >= n.inputs.size()) {
          operands.push_back(-1);
          continue;
        }
        auto step = std::find(members.begin(), members.end(), n.inputs[i].node);
        operands.push_back(step != members.end() ? int64_t(inputs.size()) + (step - members.begin())
                                                 : input_ref(n.inputs[i]));
      }
    }
    auto& fused =
        out_->add_node_raw("fused_elementwise", inputs, {}, {{"ops", ops}, {"operands", operands}},
                           root.name, root.device);
    for (int m : members) moved_node_[index(m)] = fused.id;
    moved_[index(root.id)] = {{fused.id, 0}};
    ++report_.fused;
  }

  void emit_fusion(const node& head, const fusion& f) {
    const node& p = at(f.product);
    const node& b = at(f.bias);
    attr_map attrs = p.attrs;
    attrs["activation"] = std::string(f.relu >= 0 ? "relu" : "none");
    std::vector<endpoint> inputs{moved(p.inputs[0]), moved(p.inputs[1]), moved(b.inputs[1])};
    auto& fused = out_->add_node_raw(p.op == "matmul" ? "fused_matmul" : "fused_conv2d", inputs, {},
                                     std::move(attrs), head.name, head.device);
    for (int id : {f.product, f.bias, f.relu})
      if (id >= 0) moved_node_[index(id)] = fused.id;
    moved_[index(head.id)] = {{fused.id, 0}};
    ++report_.fused;
  }

  void emit_batch_norm_fold(const node& head, const batch_norm_fold& f) {
    const node& conv = at(f.conv);
    const node& bn = at(f.batch_norm);
    std::vector<tensor> values;  // the filter, scale, offset, mean and variance
    for (const endpoint& e :
         {conv.inputs[1], bn.inputs[1], bn.inputs[2], bn.inputs[3], bn.inputs[4]}) {
      if (moved_[index(e.node)].empty()) return;  // reads a value that is gone: not needed
      const node& src = out_->at(moved(e).node);
      if (!is_foldable_constant(src)) return unfold(f);  // did not fold after all
      values.push_back(std::get<tensor>(src.attrs.at("value")));
    }
    folded_filter folded;
    try {
      folded = fold_batch_norm_into_filter(values[0], values[1], values[2], values[3], values[4],
                                           get_attr_or<double>(bn.attrs, "epsilon", bn.op, 0.001));
    } catch (const std::exception&) {
      return unfold(f);  // the batch norm fails in its step, with its own error
    }
    auto& filter = out_->add_node_raw("constant", {}, {}, {{"value", folded.filter}},
                                      unused_name(bn.name, "/folded_filter"), conv.device);
    auto& bias = out_->add_node_raw("constant", {}, {}, {{"value", folded.bias}},
                                    unused_name(bn.name, "/folded_bias"), conv.device);
    attr_map attrs = conv.attrs;
    attrs["activation"] = std::string(f.relu >= 0 ? "relu" : "none");
    auto& fused =
        out_->add_node_raw("fused_conv2d", {moved(conv.inputs[0]), {filter.id, 0}, {bias.id, 0}},
                           {}, std::move(attrs), head.name, head.device);
    for (int id : {f.conv, f.batch_norm, f.relu})
      if (id >= 0) moved_node_[index(id)] = fused.id;
    moved_[index(head.id)] = {{fused.id, 0}};
    ++report_.batch_norms_folded;
  }

  // A planned fold that cannot be made: its nodes as they were.
  void unfold(const batch_norm_fold& f) {
    for (int id : {f.conv, f.batch_norm, f.relu})
      if (id >= 0) copy_node(at(id));
  }

  // The update that takes a matmul's product in place of apply_sgd's or
  // apply_adam's gradient; null for other ops.
  static const char* matmul_update_of(const std::string& op) {
    if (op == "apply_sgd") return "apply_sgd_matmul";
    if (op == "apply_adam") return "apply_adam_matmul";
    return nullptr;
  }

  // apply_sgd or apply_adam of a matmul's product that nothing else reads (a
  // fully connected layer's weight gradient) becomes apply_sgd_matmul or
  // apply_adam_matmul: the variable takes the product block by block and the
  // gradient is never written out whole. Not with the optional gradient scale
  // or a weight decay, and in float32 only.
  void plan_update_fusions() {
    for (auto& u : in_.nodes()) {
      const char* fused = matmul_update_of(u.op);
      if (!needed_[index(u.id)] || !fused || !may_make(fused) || u.inputs.size() != 3 ||
          get_attr_or<double>(u.attrs, "weight_decay", u.op, 0.0) != 0.0 ||
          in_.frame_of(u.id) != -1)
        continue;
      const node& p = at(u.inputs[1].node);
      if (p.op != "matmul" || absorbed_[index(p.id)] || !fusable_product(p) ||
          p.outputs[0].type != dtype::float32 || in_.frame_of(p.id) != -1 ||
          !absorbable(p.id, u.id, u.id))
        continue;
      product_of_update_[index(u.id)] = p.id;
      absorbed_[index(p.id)] = true;
    }
  }

  void emit_update_fusion(const node& u, const node& p) {
    std::vector<int> controls;
    for (int c : u.control_inputs) {
      if (moved_node_[index(c)] < 0) return;  // waits on a node that is gone: not needed
      controls.push_back(moved_node_[index(c)]);
    }
    attr_map attrs = u.attrs;
    attrs["transpose_a"] = get_attr_or<bool>(p.attrs, "transpose_a", p.op, false);
    attrs["transpose_b"] = get_attr_or<bool>(p.attrs, "transpose_b", p.op, false);
    std::vector<endpoint> inputs{moved(u.inputs[0]), moved(p.inputs[0]), moved(p.inputs[1]),
                                 moved(u.inputs[2])};
    auto& fused = out_->add_node_raw(matmul_update_of(u.op), inputs, controls, std::move(attrs),
                                     u.name, u.device);
    moved_node_[index(p.id)] = fused.id;
    record(u, fused.id);
    ++report_.fused;
  }

  // relu_grad(max_pool_grad(y, pool, g), y), the backward of a relu and the
  // max_pool after it, becomes max_pool_relu_grad: one pass that writes the
  // masked gradient, where the pool's gradient had a pass of its own and the
  // relu's read it back (in a CNN, over its largest activations).
  void plan_pool_relu_grads() {
    if (!may_make("max_pool_relu_grad")) return;
    for (auto& r : in_.nodes()) {
      if (!needed_[index(r.id)] || r.op != "relu_grad" || !r.control_inputs.empty()) continue;
      const node& m = at(r.inputs[0].node);
      const auto type = r.outputs[0].type;
      if (m.op != "max_pool_grad" || absorbed_[index(m.id)] || !(r.inputs[1] == m.inputs[0]) ||
          (type != dtype::float32 && type != dtype::float64) ||
          in_.frame_of(m.id) != in_.frame_of(r.id) || !absorbable(m.id, r.id, r.id))
        continue;
      pool_grad_of_[index(r.id)] = m.id;
      absorbed_[index(m.id)] = true;
    }
  }

  void emit_pool_relu_grad(const node& r, const node& m) {
    std::vector<endpoint> inputs;
    for (auto& e : m.inputs) {
      if (moved_[index(e.node)].empty()) return;  // reads a value that is gone: not needed
      inputs.push_back(moved(e));
    }
    auto& fused = out_->add_node_raw("max_pool_relu_grad", inputs, {}, m.attrs, r.name, r.device);
    moved_node_[index(m.id)] = fused.id;
    record(r, fused.id);
    ++report_.fused;
  }

  // --- copying ---

  endpoint moved(const endpoint& e) const { return moved_[index(e.node)][index(e.index)]; }

  void copy(const node& n) {
    const size_t id = index(n.id);
    if (absorbed_[id]) return;  // made at its head
    if (fusion_at_[id].product >= 0) return emit_fusion(n, fusion_at_[id]);
    if (product_of_update_[id] >= 0) return emit_update_fusion(n, at(product_of_update_[id]));
    if (pool_grad_of_[id] >= 0) return emit_pool_relu_grad(n, at(pool_grad_of_[id]));
    if (!chain_at_[id].empty()) return emit_chain(n, chain_at_[id]);
    if (fold_at_[id].conv >= 0) return emit_batch_norm_fold(n, fold_at_[id]);
    copy_node(n);
  }

  // Copies `n`, or replaces it by a folded, deduplicated or bypassed value.
  void copy_node(const node& n) {
    const size_t id = index(n.id);
    std::vector<endpoint> inputs;
    std::vector<int> controls;
    for (auto& e : n.inputs) {
      if (moved_[index(e.node)].empty()) return;  // reads a value that is gone: not needed
      inputs.push_back(moved(e));
    }
    for (int c : n.control_inputs) {
      if (moved_node_[index(c)] < 0) return;
      controls.push_back(moved_node_[index(c)]);
    }
    // Inside a loop a value's frame is part of its meaning (an enter's input
    // must come from the enclosing frame): those nodes stay as built.
    const bool in_step_frame = in_.frame_of(n.id) == -1;
    if (needed_[id] && in_step_frame &&
        (bypass(n, inputs) || fold(n, inputs) || deduplicate(n, inputs, controls)))
      return;
    auto& made = out_->add_node_raw(n.op, inputs, controls, n.attrs, n.name, n.device);
    if (needed_[id] && in_step_frame && is_deduplicable(n))
      by_key_[key_of(n, inputs, controls)].push_back(made.id);
    record(n, made.id);
  }

  void record(const node& n, int made) {
    moved_node_[index(n.id)] = made;
    for (size_t i = 0; i < n.outputs.size(); ++i)
      moved_[index(n.id)].push_back({made, static_cast<int>(i)});
  }

  // Called for nodes of the step's frame only (copy()).
  bool bypass(const node& n, const std::vector<endpoint>& inputs) {
    if (!is_pass_through(n, in_) || kept_[index(n.id)] || !n.control_inputs.empty() ||
        !control_readers_[index(n.id)].empty())
      return false;
    const node& src = at(n.inputs[0].node);
    // A resource's or the control flow's value (a variable read, a switch's
    // branch) keeps its reader; so does a value moving to another device.
    const bool plain_value =
        src.def->role == op_role::placeholder || src.def->role == op_role::recv;
    if ((src.def->served_by_runtime() && !plain_value) || src.device != n.device ||
        in_.frame_of(src.id) != -1)
      return false;
    moved_[index(n.id)] = {inputs[0]};
    moved_node_[index(n.id)] = inputs[0].node;
    ++report_.bypassed;
    return true;
  }

  // Whether fold() takes up `n` at all (then its inputs decide).
  bool may_fold(const node& n) const {
    // A colocation stays a node's: placement checks it (a constant has none).
    if (!is_pure(n) || !n.control_inputs.empty() || n.attrs.count(colocate_attr) ||
        in_.frame_of(n.id) != -1)
      return false;
    return options_.fold_on_tasks || n.device.empty() || device_name::parse(n.device).job.empty();
  }

  bool small_enough_to_fold(const tensor_spec& spec) const {
    return spec.dims.is_fully_defined() &&
           double(spec.dims.num_elements()) * double(dtype_size(spec.type)) <=
               double(options_.max_folded_bytes);
  }

  bool fold(const node& n, const std::vector<endpoint>& inputs) {
    if (!may_fold(n)) return false;
    std::vector<tensor> values;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const node& src = out_->at(inputs[i].node);
      if (is_foldable_constant(src)) {
        values.push_back(std::get<tensor>(src.attrs.at("value")));
        continue;
      }
      auto& spec = src.outputs[index(inputs[i].index)];
      if (!reads_only_shape(n.op, i) || !small_enough_to_fold(spec) ||
          may_be_dead_[index(n.inputs[i].node)])
        return false;
      values.push_back(tensor(spec.type, spec.dims));  // only its shape is read
    }
    for (auto& spec : n.outputs)
      if (!small_enough_to_fold(spec)) return false;
    std::vector<tensor> outputs;
    try {
      outputs = run_kernel(n.op, std::move(values), n.attrs);
    } catch (const std::exception&) {
      return false;  // the node fails in its step, with its own error
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string name = i == 0 ? n.name : unused_name(n.name, "/folded_" + std::to_string(i));
      auto& c = out_->add_node_raw("constant", {}, {}, {{"value", outputs[i]}}, name, n.device);
      if (i == 0) moved_node_[index(n.id)] = c.id;
      moved_[index(n.id)].push_back({c.id, 0});
    }
    ++report_.folded;
    return true;
  }

  // `base` + `suffix`, with a number after it if either graph has that name.
  std::string unused_name(const std::string& base, const std::string& suffix) const {
    std::string name = base;
    name.append(suffix);
    for (int i = 1; in_.find(name) || out_->find(name); ++i)
      name = base + suffix + "_" + std::to_string(i);
    return name;
  }

  std::string key_of(const node& n, const std::vector<endpoint>& inputs,
                     std::vector<int> controls) const {
    std::string key = n.op + "|" + n.device + "|";
    for (auto& e : inputs) key += endpoint_key(e) + ",";
    std::sort(controls.begin(), controls.end());
    key += "|";
    for (int c : controls) key += std::to_string(c) + ",";
    key += "|";
    for (auto& [name, value] : n.attrs) key += name + ",";
    return key;
  }

  bool deduplicate(const node& n, const std::vector<endpoint>& inputs,
                   const std::vector<int>& controls) {
    if (!is_deduplicable(n)) return false;
    auto it = by_key_.find(key_of(n, inputs, controls));
    if (it == by_key_.end()) return false;
    for (int earlier : it->second) {
      if (!same_attrs(out_->at(earlier).attrs, n.attrs)) continue;
      record(n, earlier);
      ++report_.deduplicated;
      return true;
    }
    return false;
  }

  run_signature mapped_signature() const {
    run_signature sig;
    for (auto& e : sig_.feeds) sig.feeds.push_back(moved(e));
    for (auto& e : sig_.fetches) sig.fetches.push_back(moved(e));
    for (int t : sig_.targets) sig.targets.push_back(moved_node_[index(t)]);
    return sig;
  }
};

}  // namespace

optimized_graph optimize_graph(const graph& g, const run_signature& sig,
                               const graph_optimizer_options& options) {
  return optimizer(g, sig, options).run();
}

}  // namespace actorflow
