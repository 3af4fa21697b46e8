// Synchronous data-parallel training with backup workers (the paper's
// section 4.4; TensorFlow's SyncReplicasOptimizer), built from graph ops:
//
// - each worker computes its gradients and applies them to one conditional
//   accumulator per variable (colocated with the variable), tagged with the
//   worker's local step, then waits for a token from the token queue (on the
//   global step's task) and takes the token as its new local step;
// - the chief repeatedly takes the average of the first `replicas_to_aggregate`
//   gradients from each accumulator, applies it with the optimizer (global_step
//   += 1), moves the accumulators to the new step, and hands out one token per
//   worker.
// With n workers and m = n - b to aggregate, the slowest b workers of each step
// are dropped: their gradients arrive tagged with an old step and the
// accumulators drop them, never applying a stale gradient.
//
// The gradient of an embedding (a gather from the variable) goes to a sparse
// accumulator, which keeps only the rows the batches named; its average is
// exactly the dense one, and sgd, adagrad and lazy_adam then update only
// those rows (clipped by the norm of the averaged rows when the optimizer
// clips). optimizer_options::row_updates = false accumulates every gradient
// densely.
#pragma once
#include "core/export.hpp"
#include "ops/train.hpp"

namespace actorflow {

struct ACTORFLOW_API sync_replicas_ops {
  /// A worker's step: apply its gradients, wait for a token, take it as local_step.
  operation worker_train;
  /// The chief's step: aggregate, apply, advance the global step, hand out tokens.
  operation chief_update;
  /// The global step as the chief's step left it (fetch it with chief_update).
  output chief_step;
  /// Sets the worker's local step to the global step: run it before the first
  /// worker_train (and again when a worker rejoins).
  operation local_step_init;
  /// The chief runs it at the end: once the tokens left are taken, workers
  /// waiting for one fail with "closed" instead of waiting forever.
  operation close_tokens;
  /// A restarted chief runs it before its first aggregation: the
  /// accumulators set to the current global step, then one token of that
  /// step per worker (TensorFlow's chief init tokens). The
  /// workers still waiting for the token the old chief never handed out take
  /// these and compute their next gradients at the current step; without
  /// them the new chief would wait for gradients that never come, and they
  /// for tokens, until the step timeout. A token too many costs a worker one
  /// gradient the accumulators drop as stale.
  operation chief_init_tokens;
  /// This worker's step: the step its gradients are computed at.
  variable local_step;
  variable global_step;
};

/// Builds the synchronous training of `loss` with `opt`: `total_replicas` (n)
/// workers of which the first `replicas_to_aggregate` (m, 1 <= m <= n) of each
/// step count. `worker_device` is this worker's device ("/job:worker/task:1"),
/// where its local step lives. `vars`: the variables to train, as for
/// optimizer::compute_gradients (default: every float variable the loss
/// depends on).
ACTORFLOW_API sync_replicas_ops sync_replicas(optimizer& opt, output loss,
                                              int replicas_to_aggregate, int total_replicas,
                                              const std::string& worker_device,
                                              std::vector<variable> vars = {});

}  // namespace actorflow
