// A full softmax over classes whose weights are split by rows over parameter servers: the
// model-parallel output layer of a large-vocabulary language model. Each shard computes its own
// logits beside its weights and sends back per-example values only, so neither the weights
// ([classes, dim]) nor the logits ([batch, classes]) cross the network.
//
// This is actorflow's own, not a TensorFlow op: in TensorFlow 1.x a full softmax over a
// partitioned variable is written with the shards (or their logits) brought together where the
// loss is computed, so a [classes, dim] or [batch, classes] tensor crosses the network each step.
//
// Composed from primitives (matmul, reductions, one_hot), so it has gradients and runs on any
// device. Gradients are built beside the nodes they differentiate (colocate_gradients_with_ops,
// core/gradients.cpp): each shard's logits gradient (softmax - one hot) and its weights' and
// biases' gradients form on the shard's device, and only d(inputs), [batch, dim], returns from
// each shard.
#pragma once
#include <string>

#include "core/export.hpp"
#include "core/graph.hpp"
#include "ops/embedding.hpp"

namespace actorflow {

/// The per-example loss [batch] of sparse_softmax_cross_entropy_with_logits(inputs @ weights^T +
/// biases, labels), equal up to rounding. weights [classes, dim] and biases [classes] are split
/// alike (the same shards and partition strategy; float32 or float64), inputs [batch, dim] of
/// their dtype, labels [batch] int32 or int64 in [0, classes) (one outside fails the run,
/// naming it). Shard k's part runs on the device of weights.shards[k]: its logits
/// inputs @ W_k^T + b_k, their log-sum-exp (the row maximum subtracted first, so large logits stay
/// finite) and the true class's logit where the label is on shard k (0 elsewhere). Where the
/// caller runs: loss = log-sum-exp over the shards' log-sum-exps - the sum of the true logits.
ACTORFLOW_API output sharded_softmax_cross_entropy(
    const partitioned_variable& weights, const partitioned_variable& biases, output inputs,
    output labels, const std::string& name = "sharded_softmax_cross_entropy");

}  // namespace actorflow
