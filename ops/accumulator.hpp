// Conditional accumulators (TensorFlow's ConditionalAccumulator): the state of
// synchronous training with backup workers (SyncReplicasOptimizer). Workers
// apply gradients tagged with the step they were computed at; gradients older
// than the accumulator's global step are dropped; the chief takes the average
// once enough have arrived, which starts the next step.
//
// Like a queue (ops/queue.hpp), an accumulator is a resource node served by an
// actor that the session spawns for it; its ops take it as input 0 and are sent
// to that actor, so they are serialized without locks, and a take that must
// wait holds a response promise rather than a thread.
#pragma once
#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// An accumulator of gradients of one dtype (float32 or float64) and shape
/// (dims may be unknown, -1: the first gradient after a take fixes them). The
/// output is the accumulator's reference: it feeds the accumulator ops, and
/// fetching it is an error.
ACTORFLOW_API output conditional_accumulator(graph& g, dtype type, const shape& dims,
                                             const std::string& name = "");
/// Adds `grad` when `local_step` (int64 scalar) >= the accumulator's global
/// step; drops it silently otherwise (a stale gradient is never applied). A
/// gradient of another dtype or shape is an error naming both.
ACTORFLOW_API operation accumulator_apply_gradient(output acc, output local_step, output grad,
                                                   const std::string& name = "");
/// Waits until at least `num_required` (int32 scalar, >= 1) gradients are
/// accumulated, then returns their average, resets the sum and the count, and
/// increments the global step. Waiting takes are served in arrival order.
ACTORFLOW_API output accumulator_take_gradient(output acc, output num_required,
                                               const std::string& name = "");
/// Sets the global step to `new_step` (int64 scalar), a smaller one too, as
/// TensorFlow's does (it logs a warning then): a chief restarted from an
/// older checkpoint brings the step back, and gradients of that step count.
ACTORFLOW_API operation accumulator_set_global_step(output acc, output new_step,
                                                    const std::string& name = "");
/// The number of gradients accumulated since the last take (int32 scalar).
ACTORFLOW_API output accumulator_num_accumulated(output acc, const std::string& name = "");

/// An accumulator of row gradients (TensorFlow's SparseConditionalAccumulator)
/// for a variable of `dims` (rank >= 1, fully known): the gradient of a gather
/// from the variable, as rows and their indices. It keeps only the rows named
/// since the last take, so its cost follows the batches, not the variable.
/// set_global_step and num_accumulated work on it as on a dense accumulator;
/// the dense apply and take refuse it, and the sparse ones refuse a dense one.
ACTORFLOW_API output sparse_conditional_accumulator(graph& g, dtype type, const shape& dims,
                                                    const std::string& name = "");
/// Adds the gradient rows `rows` (indices' dims + dims[1:]) for the variable
/// rows `indices` (int32 or int64, repeats add up), unless `local_step` is
/// older than the accumulator's global step (then it is dropped).
ACTORFLOW_API operation sparse_accumulator_apply_gradient(output acc, output local_step,
                                                          output rows, output indices,
                                                          const std::string& name = "");
/// The average gradient as rows: every variable row named since the last take,
/// ascending and unique (int64), with the sum of its gradient rows divided by
/// the number of gradients. Scattered into the variable's shape, that is
/// exactly the dense accumulator's average. Waits, counts and steps as
/// accumulator_take_gradient does.
struct ACTORFLOW_API accumulated_rows {
  output rows;     // (n, dims[1:]...)
  output indices;  // (n), int64
};
ACTORFLOW_API accumulated_rows sparse_accumulator_take_gradient(output acc, output num_required,
                                                                const std::string& name = "");

/// Whether the attributes of an accumulator node (or of an op on it) describe
/// a sparse accumulator.
ACTORFLOW_API bool is_sparse_accumulator(const attr_map& attrs);

/// The gradient spec stored in the attributes of a conditional_accumulator
/// node (or of an op on it); `op` names the caller in errors.
ACTORFLOW_API tensor_spec accumulator_spec_of(const attr_map& attrs, const std::string& op);
/// Checks a gradient against the accumulator's spec; the error names the
/// accumulator and both specs.
ACTORFLOW_API void check_accumulator_gradient(const tensor_spec& spec, const tensor_spec& grad,
                                              const std::string& accumulator_name);

}  // namespace actorflow
