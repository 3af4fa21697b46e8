// The dataflow graph and the handles the C++ builder API hands out.
//
// Nodes are appended in topological order: a node's inputs always name earlier
// nodes, so a graph can hold no cycle. Shapes and dtypes are inferred as each
// node is added; a mismatch throws at once, naming the op and the shapes.
#pragma once
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/device_name.hpp"
#include "core/export.hpp"
#include "core/op_registry.hpp"

namespace actorflow {

/// One output of one node.
struct ACTORFLOW_API endpoint {
  int node = -1;
  int index = 0;
  friend bool operator==(const endpoint& a, const endpoint& b) {
    return a.node == b.node && a.index == b.index;
  }
};

struct ACTORFLOW_API node {
  int id = -1;
  std::string name;
  std::string op;
  std::string device;  // e.g. "/job:ps/task:0/cpu:0" (core/device_name.hpp); empty: the default
  std::vector<endpoint> inputs;
  std::vector<int> control_inputs;
  attr_map attrs;
  std::vector<tensor_spec> outputs;
  const op_def* def = nullptr;
};

/// A constant that waits on nothing: its value goes into each consumer (in
/// one process, folded; in a cluster, copied into each partition that uses
/// it) instead of running as a node.
inline bool is_foldable_constant(const node& n) {
  return n.def->role == op_role::constant && n.control_inputs.empty();
}

/// An enter of a loop invariant (made with is_constant): its value comes
/// once per frame and serves every iteration.
inline bool is_loop_invariant(const node& n) {
  return n.def->role == op_role::enter_frame &&
         get_attr_or<bool>(n.attrs, "is_constant", n.op, false);
}

class graph;

/// A handle to a node's output: what op functions take and return.
class ACTORFLOW_API output {
 public:
  output() = default;
  output(graph* g, endpoint e) : graph_(g), endpoint_(e) {}

  graph& owner() const;
  endpoint ref() const { return endpoint_; }
  const actorflow::node& node() const;
  const tensor_spec& spec() const;
  dtype type() const { return spec().type; }
  const actorflow::shape& dims() const { return spec().dims; }
  /// "name" for output 0, "name:i" otherwise.
  std::string name() const;
  bool valid() const { return graph_ != nullptr; }

 private:
  graph* graph_ = nullptr;
  endpoint endpoint_;
};

/// A handle to a node run for its effect (an initializer, a train op).
class ACTORFLOW_API operation {
 public:
  operation() = default;
  operation(graph* g, int node) : graph_(g), node_(node) {}
  graph& owner() const;
  int id() const { return node_; }
  const actorflow::node& node() const;
  const std::string& name() const { return node().name; }
  bool valid() const { return graph_ != nullptr; }

 private:
  graph* graph_ = nullptr;
  int node_ = -1;
};

/// What a gradient function sees and fills (see op_def::gradient). Holds
/// copies, not references into the graph: a gradient function adds nodes, and
/// that may move the graph's node storage.
struct ACTORFLOW_API grad_context {
  graph& g;
  int node_id = -1;
  std::string op;
  std::string node_name;
  attr_map attrs;
  /// The forward node's inputs and outputs.
  std::vector<output> inputs;
  std::vector<output> outputs;
  /// d(ys)/d(output i). When only some outputs receive a gradient, the others
  /// hold zeros of their shape, so every entry is valid.
  std::vector<output> grads;
  /// To be set: d(ys)/d(input i). Left invalid for inputs with no gradient
  /// (integer inputs, indices, shapes).
  std::vector<output> input_grads;

  ACTORFLOW_ATTR_ACCESSORS
  const output& input(size_t i) const { return inputs[i]; }
  const output& grad(size_t i = 0) const { return grads[i]; }
};

class ACTORFLOW_API graph {
 public:
  graph() = default;
  graph(const graph&) = delete;  // handles point into the graph
  graph& operator=(const graph&) = delete;

  /// Adds a node: resolves the op, validates the inputs, infers the outputs.
  /// The name is made unique and prefixed with the current name scope; the
  /// current device scope and control dependencies apply.
  const node& add_node(const std::string& op, std::vector<output> inputs, attr_map attrs = {},
                       const std::string& name = "");
  /// Adds a node from raw parts (the loader uses it); the name is taken as is and must be new.
  const node& add_node_raw(const std::string& op, const std::vector<endpoint>& inputs,
                           const std::vector<int>& control_inputs, attr_map attrs,
                           const std::string& name, const std::string& device);

  size_t size() const { return nodes_.size(); }
  const std::vector<node>& nodes() const { return nodes_; }
  const node& at(int id) const;
  /// nullptr when there is no node of that name.
  const node* find(const std::string& name) const;
  /// Resolves "name" or "name:i" to an output; throws naming the unknown part.
  output output_by_name(const std::string& name);
  operation operation_by_name(const std::string& name);

  /// RAII scopes, used as `auto s = g.name_scope("layer1");`.
  class scope_guard {
   public:
    template <class Stack>
    explicit scope_guard(Stack* stack) : pop_([stack] { stack->pop_back(); }) {}
    explicit scope_guard(std::function<void()> on_exit) : pop_(std::move(on_exit)) {}
    scope_guard(scope_guard&& o) noexcept : pop_(std::move(o.pop_)) { o.pop_ = nullptr; }
    ~scope_guard() {
      if (pop_) pop_();
    }

   private:
    std::function<void()> pop_;
  };
  scope_guard name_scope(const std::string& scope);
  /// Nodes added in the scope get `device`, merged with the enclosing scopes'
  /// (the inner name's parts win): "/job:worker/task:1" then "/cpu:0" gives
  /// "/job:worker/task:1/cpu:0". Throws for a malformed name.
  scope_guard device_scope(const std::string& device);
  /// Nodes added in the scope get the device `fn` picks (replica_device_setter).
  scope_guard device_function_scope(device_function fn);
  /// Nodes added in the scope run where `op` runs, on its task and device
  /// (TensorFlow's colocate_with): they carry its name in the attribute
  /// "_colocate_with", and placement ignores their own device hint.
  scope_guard colocate_with(const operation& op);
  class control_guard {
   public:
    control_guard(graph* g, size_t depth) : graph_(g), depth_(depth) {}
    control_guard(control_guard&& o) noexcept : graph_(o.graph_), depth_(o.depth_) {
      o.graph_ = nullptr;
    }
    ~control_guard() {
      if (graph_) graph_->control_deps_.resize(depth_);
    }

   private:
    graph* graph_;
    size_t depth_;
  };
  /// Nodes added while the guard lives run after `deps`.
  control_guard control_dependencies(const std::vector<operation>& deps);
  /// Nodes added while the guard lives form branch `branch` (0: false, 1:
  /// true) of a cond on `pred` (ops/control_flow.hpp): each input from
  /// outside the branch passes through a switch on `pred` (its output
  /// `branch`), so what depends on one is *gated*: it runs only when the
  /// branch is taken. A stateful op (an update, a variable, a random draw)
  /// with no gated input runs after the branch's pivot instead, so that no
  /// effect of an untaken branch happens. Constants from outside pass
  /// through a switch too (their value still informs shape inference), so
  /// that their gradients come back through it. Branches nest.
  scope_guard cond_branch_scope(const output& pred, int branch);
  /// Inside a cond branch: whether `o` runs only when the innermost branch
  /// is taken. True outside any branch.
  bool is_gated(const output& o) const;
  /// The innermost open branch's pivot: an op that runs exactly when it is
  /// taken (a control dependency on it gates a node). Throws outside a branch.
  operation branch_pivot();

  /// A while loop's frame (ops/control_flow.hpp): the nodes between its
  /// enters and its exits. Frames are found from the graph's structure as
  /// nodes are added: an enter opens the frame its `frame` attribute names,
  /// an exit leaves it, any other node lives in the frame of its inputs
  /// (constants, which are folded into their consumers, fit every frame).
  struct loop_frame_info {
    std::string name;
    int parent = -1;  // index into loop_frames(); -1: the step's own frame
  };
  const std::vector<loop_frame_info>& loop_frames() const { return frames_; }
  /// The frame node `id` lives in: an index into loop_frames(), or -1.
  int frame_of(int id) const { return std::max(-1, node_frame_.at(static_cast<size_t>(id))); }
  /// Whether frame `inner` is `outer` or lies inside it (-1: the step's frame).
  bool frame_within(int inner, int outer) const;
  /// Nodes added while the guard lives form the body (or predicate) of loop
  /// frame `frame`, whose enters the caller made already: an input from
  /// outside the frame enters it as a loop invariant (once per outside
  /// output; constants stay folded instead), and a node that would not run
  /// once per iteration (its inputs are all invariants or constants) runs
  /// after `pivot`, a node that fires in every iteration. Control
  /// dependencies opened outside do not reach inside: the enters carry them.
  scope_guard loop_body_scope(int frame, int pivot);
  /// Changes the pivot of the innermost open loop body.
  void set_loop_pivot(int pivot);
  /// Set while gradients of a loop are built: maps an input that lives in a
  /// frame the new node cannot see (a forward loop's value) to one it can.
  using frame_resolver = std::function<endpoint(const endpoint& e, int frame)>;
  scope_guard frame_resolver_scope(frame_resolver fn);
  /// The frame new nodes are added to: the innermost open loop body, or -1.
  int current_frame() const;
  /// Inside a loop body: whether `o` fires once in every iteration of it
  /// (not a loop invariant or a folded constant).
  bool fires_every_iteration(const output& o) const;
  /// The index of the loop frame named `name`, or -1.
  int find_frame(const std::string& name) const;

  /// Named lists of operations, as TensorFlow's graph collections: a batch
  /// normalization layer puts its moving averages' updates in
  /// "update_ops" (ops/normalization.hpp). Not part of a saved graph file.
  void add_to_collection(const std::string& key, const operation& op);
  /// The operations added under `key`, in order; empty for an unknown key.
  std::vector<operation> collection(const std::string& key);

 private:
  std::string unique_name(const std::string& base);
  std::vector<node> nodes_;
  std::unordered_map<std::string, int> by_name_;
  std::unordered_map<std::string, int> name_counts_;
  std::vector<std::string> name_scopes_;
  std::string device_for(const std::string& op, const attr_map& attrs) const;
  // One device scope: a name, or a function (the other left empty).
  struct device_scope_entry {
    std::string name;
    device_function fn;
  };
  std::vector<device_scope_entry> device_scopes_;
  std::vector<std::string> colocations_;  // colocate_with scopes, innermost last
  std::vector<int> control_deps_;
  std::map<std::string, std::vector<int>> collections_;
  // The open cond branches, innermost last.
  struct cond_branch {
    endpoint pred;
    int branch = 0;
    int pivot = -1;                                    // runs exactly when the branch is taken
    int first_node = 0;                                // nodes from here on are inside the branch
    std::map<std::pair<int, int>, endpoint> switched;  // outside output -> its switch
    std::unordered_set<int> gated;                     // nodes that run only when taken
  };
  std::vector<cond_branch> cond_branches_;
  // (pred, outside output, enclosing branch's pivot or -1) -> the switch made
  // for it: a cond's two branches share one, each taking its own output.
  std::map<std::tuple<int, int, int, int, int>, int> branch_switches_;
  endpoint into_branch(const endpoint& e);

  std::vector<loop_frame_info> frames_;
  std::unordered_map<std::string, int> frame_by_name_;
  std::vector<int> node_frame_;  // node id -> frame index, -1: the step's frame
  // A node of a partition fed by recvs alone: its frame is its sender's,
  // which this graph may not know.
  static constexpr int follows_recv = -3;
  // The open loop bodies, innermost last.
  struct loop_body {
    int frame = -1;
    int pivot = -1;
    int first_node = 0;
    std::map<std::pair<int, int>, endpoint> invariants;  // outside output -> its enter
    std::unordered_set<int> per_iteration;               // nodes that fire every iteration
    std::vector<int> outer_control;                      // control_deps_ when it opened
  };
  std::vector<loop_body> loop_bodies_;
  std::vector<frame_resolver> resolvers_;
  // Whether the innermost open context (a cond branch or a loop body) is a loop body.
  bool innermost_is_loop() const;
  endpoint into_context(const endpoint& e);
  tensor constant_value(int id) const;
  endpoint into_loop(const endpoint& e);
  int structural_frame(const std::string& op, const std::vector<endpoint>& inputs,
                       const std::vector<int>& control_inputs, const attr_map& attrs,
                       const std::string& name);
  bool fits_every_frame(int id) const;
};

}  // namespace actorflow
