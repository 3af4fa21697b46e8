// The graph optimizer: before a signature's actors are spawned, the session
// rewrites a copy of the graph for it (the user's graph is never changed):
//  - constant folding: a stateless node whose inputs are all constants (or
//    are read only for a shape that is known, as ones_like's) runs once, here,
//    and becomes a constant; in graph order, so whole constant subgraphs fold;
//  - common subexpressions: stateless nodes of one op with the same inputs,
//    control inputs, attributes and device become one;
//  - pass-throughs: identity, stop_gradient and reshapes to the same shape hand
//    their input on (none that is fetched, waited on, or reads a resource);
//  - fusion (CPU only): matmul or conv2d + bias_add (+ relu) become one
//    fused_matmul or fused_conv2d (ops/epilogue.hpp) where the intermediate
//    values have no other consumer; and chains of element-wise float32 ops of
//    one shape (unary ones, add, sub, mul, div) whose inner values feed only
//    the chain become one fused_elementwise (ops/elementwise.hpp), one pass
//    over memory. Gradients are built before a session compiles, so the
//    training graph's forward layers fuse too. And apply_sgd or apply_adam of
//    a matmul's product that nothing else reads (a weight gradient) becomes
//    apply_sgd_matmul or apply_adam_matmul (ops/optimizers.cpp): the variable
//    takes the product a block at a time, and the whole gradient is never
//    written out. And
//    relu_grad of a max_pool_grad of the relu's output becomes one
//    max_pool_relu_grad (ops/pool.hpp). And an
//    inference-mode fused_batch_norm after a conv2d, whose filter and
//    statistics are constants (an exported model's), folds into the filter
//    and a bias: the three (with a relu after) become one fused_conv2d.
// It changes no result beyond float rounding: folding runs the same CPU
// kernels, and the fused kernels give the bits of the ops one by one. Inside
// while loops, where a value's frame is part of its meaning, only fusion
// applies. Names are kept: a fused node takes its last op's name.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "actors/compile/signature.hpp"
#include "core/graph.hpp"

namespace actorflow {

struct graph_optimizer_options {
  /// Fuse into the fused ops (fused_matmul, fused_conv2d, fused_elementwise,
  /// apply_sgd_matmul, apply_adam_matmul, max_pool_relu_grad).
  bool fuse = true;
  /// Whether every device of the run has a kernel for fused op `op` (the
  /// session asks its accelerators; a GPU has fused_matmul's). Unset: every
  /// device does (CPU devices run them all).
  std::function<bool(const std::string& op)> runs_everywhere;
  /// Fold nodes placed on a task ("/job:ps/task:0/..."). A folded value is
  /// copied into each partition that reads it, so the task would no longer
  /// run it: the session turns this off in a cluster, where running a node
  /// on its task (and failing when the task is down) is the user's intent.
  bool fold_on_tasks = true;
  /// A folded value over this size stays a node (TensorFlow's limit).
  size_t max_folded_bytes = size_t{10} << 20;
};

/// What the optimizer did; node counts are those the signature needs.
struct graph_optimizer_report {
  size_t nodes_before = 0, nodes_after = 0;
  size_t folded = 0;              // nodes replaced by constants
  size_t deduplicated = 0;        // nodes replaced by an equal earlier one
  size_t bypassed = 0;            // pass-throughs removed
  size_t fused = 0;               // fused nodes made (each replaces 2 or 3)
  size_t batch_norms_folded = 0;  // inference batch norms folded into their convolution
};

struct optimized_graph {
  std::unique_ptr<graph> g;
  run_signature sig;  // the signature in g's node ids
  graph_optimizer_report report;
};

/// An optimized copy of `g` for `sig`. Nodes the signature does not need are
/// copied as they are (resource nodes, colocation targets), unless they read
/// a value the optimizer removed.
optimized_graph optimize_graph(const graph& g, const run_signature& sig,
                               const graph_optimizer_options& options = {});

}  // namespace actorflow
