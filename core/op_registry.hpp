// The op registry: one op_def per op, filled by the op families in ops/.
//
// An op_def holds what every layer needs of an op: its arity, its shape and
// dtype inference (run as the graph is built), its CPU kernel, and for ops that
// update a variable, the update the variable actor applies.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/attr.hpp"
#include "core/export.hpp"
#include "core/tensor.hpp"

namespace actorflow {

/// dtype and (possibly partial) shape of one tensor in the graph.
struct ACTORFLOW_API tensor_spec {
  dtype type = dtype::float32;
  actorflow::shape dims;
  std::string to_string() const { return std::string(dtype_name(type)) + dims.to_string(); }
};

/// What a shape function sees: the op, the input specs and the attributes.
struct ACTORFLOW_API shape_context {
  const std::string& op;
  const std::vector<tensor_spec>& inputs;
  const attr_map& attrs;
  /// Values of inputs that are graph constants (empty tensor otherwise).
  const std::vector<tensor>* constant_inputs = nullptr;

  ACTORFLOW_ATTR_ACCESSORS
};

/// What a kernel sees: its inputs, attributes, and the outputs it must set.
struct ACTORFLOW_API kernel_context {
  const std::string& op;
  const std::string& node_name;
  const attr_map& attrs;
  std::vector<tensor> inputs;
  std::vector<tensor> outputs;
  /// How many times this node's kernel ran before (stateful random ops use it
  /// so that each run draws new numbers, reproducibly for a given seed).
  uint64_t invocation = 0;

  ACTORFLOW_ATTR_ACCESSORS
  const tensor& input(size_t i) const { return inputs[i]; }
  /// Allocates output i (uninitialized) and returns it for writing.
  tensor& allocate_output(size_t i, dtype type, shape dims);
  /// Output i of an element-wise kernel, which writes element k only after
  /// reading element k of its inputs: input `from`'s own buffer when nothing
  /// else holds it and it has the output's dtype and shape (a gradient
  /// accumulator, an activation passed on once), else a new one. Saves the
  /// allocation and keeps the data in cache.
  tensor& reuse_or_allocate_output(size_t i, size_t from, dtype type, const shape& dims);
  void set_output(size_t i, tensor t);
  [[noreturn]] void fail(error_code code, const std::string& what) const {
    actorflow::fail(code, op, what);
  }
};

/// The state a variable actor owns: its value and the optimizer slots beside it.
struct ACTORFLOW_API variable_state {
  tensor value;
  std::map<std::string, tensor> slots;
  bool initialized() const { return value.valid(); }
  /// The value, made safe to write in place: cloned first if a reader still
  /// holds the buffer (copy-on-write).
  tensor& mutable_value() {
    if (!value.is_unique()) value = value.clone();
    return value;
  }
};

struct grad_context;  // core/graph.hpp: it speaks in graph outputs

using shape_fn = std::function<std::vector<tensor_spec>(const shape_context&)>;
using kernel_fn = std::function<void(kernel_context&)>;
/// Makes a node's kernel from its attributes (see op_def::make_kernel).
using kernel_maker = std::function<kernel_fn(const attr_map&)>;
/// Applied by the variable actor, serialized with every other update of that
/// variable. ctx.inputs excludes the variable reference (input 0). Sets ctx.outputs.
using update_fn = std::function<void(variable_state&, kernel_context&)>;
/// Adds the nodes that compute the gradient of an op's inputs from the
/// gradients of its outputs (see grad_context); written with graph ops.
using grad_fn = std::function<void(grad_context&)>;

/// What the runtime does with a node of an op, set where the op is
/// registered: the graph passes, the executable and the gradient code read
/// the role, never the op's name.
enum class op_role : uint8_t {
  kernel,          // runs its kernel
  constant,        // a fixed value, bound into its consumers where it can be
  group,           // does nothing: groups control dependencies (a training step's op)
  placeholder,     // takes the value fed to the step
  variable,        // a variable: a read asks the variable's actor for its value
  resource,        // another resource (a queue, an accumulator): its actor serves its ops
  resource_op,     // sent to the actor of the resource at input 0 (an update, a queue op);
                   // the registry sets it for every op with an update or a resource
  send,            // forwards its inputs over a cut edge, to its recv
  recv,            // takes the value its send forwards, from another partition
  switch_value,    // control flow: data to the output the predicate picks, dead to the other
  merge_values,    // the first live input (a cond's join, or a loop's head)
  enter_frame,     // a loop: its input, in the loop's frame
  exit_frame,      // a loop: its last live input, in the enclosing frame
  next_iteration,  // a loop's back edge, to its merge
  history_push,    // a loop gradient: saves its input per iteration
  history_read,    // a loop gradient: a saved value, by iteration
};

struct ACTORFLOW_API op_def {
  std::string name;
  op_role role = op_role::kernel;
  /// Number of data inputs; -1 for variadic (at least min_inputs).
  int num_inputs = 0;
  int min_inputs = 0;
  shape_fn infer;
  kernel_fn kernel;
  /// Optional: makes the kernel of one node from its attributes, once, when
  /// the node's plan is made (as TensorFlow's OpKernel constructor reads
  /// them), so that a firing reads no attribute by name. The registry makes
  /// `kernel` from it for eager runs and constant folding.
  kernel_maker make_kernel;
  /// Set for ops applied to a variable: input 0 is the variable's reference edge.
  update_fn update;
  /// Set for ops served by another resource actor (a queue): the op of the
  /// resource node at input 0, e.g. "fifo_queue". The runtime sends such ops
  /// to that node's actor, as it sends updates to a variable's actor.
  std::string resource;
  /// The resource actor may hold the request until something else happens
  /// (a dequeue on an empty queue, a take before enough gradients): a step
  /// that fails or is aborted cancels it, so it takes nothing for nobody.
  bool may_wait = false;
  /// Always hand to the device's pool (matmul, conv); otherwise decided by size.
  bool expensive = false;
  /// Has side effects or draws random numbers: never folded or deduplicated.
  bool stateful = false;
  /// One line for docs and errors.
  std::string summary;
  /// Every op either has a gradient or says it has none (integer outputs,
  /// sources, updates, random draws); the registry test checks it.
  grad_fn gradient;
  bool not_differentiable = false;
  /// Inputs an accelerator's kernel reads in host memory (TensorFlow's
  /// HostMemory): indices it checks and plans with before it launches, so
  /// that a bad index fails as on the CPU, naming it, with no wait for the
  /// device. They reach it as host values (actors/run/device_edges.hpp).
  /// Counted as the kernel's inputs (an update's without its variable).
  std::vector<int> host_memory_inputs;
  /// Its kernel runs on the host on any device (a sampler drawing in
  /// sequence): placed on an accelerator, it runs in host memory, as a
  /// node of integers only does (actors/run/executable.cpp), and its
  /// consumers there copy its outputs in.
  bool host_kernel = false;
  /// Outputs an accelerator's kernel gives in host memory (a tensor array's
  /// written flags, which its next op checks on the host).
  std::vector<int> host_memory_outputs;

  /// True for ops that the runtime sends to a resource actor (input 0).
  bool acts_on_resource() const { return update || !resource.empty(); }
  /// Ops whose work the runtime's own actors do rather than a kernel:
  /// feeds, resources and what their actors apply, transfers, control flow.
  bool served_by_runtime() const {
    return role != op_role::kernel && role != op_role::constant && role != op_role::group;
  }
  /// The op of the node input 0 must be, for ops that act on a resource.
  std::string resource_op() const { return update ? "variable" : resource; }
};

class ACTORFLOW_API op_registry {
 public:
  static op_registry& global();
  /// Registers an op; throws when the name is taken or the def is incomplete.
  void add(op_def def);
  /// nullptr for an unknown op.
  const op_def* find(const std::string& name) const;
  /// Throws "[graph] unknown op 'name'".
  const op_def& get(const std::string& name) const;
  std::vector<const op_def*> all() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<op_def>> ops_;
};

/// Registers at static-initialization time; the library is shared, so every
/// family's registrar runs when it loads.
struct ACTORFLOW_API op_registrar {
  explicit op_registrar(op_def def) { op_registry::global().add(std::move(def)); }
};

/// Infers output specs for `op` (validating arity first).
ACTORFLOW_API std::vector<tensor_spec> infer_outputs(
    const op_def& def, const std::vector<tensor_spec>& inputs, const attr_map& attrs,
    const std::vector<tensor>* constant_inputs = nullptr);

/// Runs one op eagerly on concrete tensors: infers (and so validates) the output
/// specs, runs the CPU kernel, and checks the outputs against the specs.
/// Used by tests and by tools; graphs run through the session.
ACTORFLOW_API std::vector<tensor> run_kernel(const std::string& op, std::vector<tensor> inputs,
                                             const attr_map& attrs = {}, uint64_t invocation = 0);

}  // namespace actorflow
