// Softmax and cross-entropy along the last axis, numerically stable (the row maximum is
// subtracted before exponentiating, so logits of 1e4 give no inf or nan).
//
// Ops: softmax, log_softmax, softmax_cross_entropy_with_logits,
// sparse_softmax_cross_entropy_with_logits.
#pragma once
#include "core/export.hpp"
#include "core/graph.hpp"

namespace actorflow {

/// exp(x) / sum(exp(x)) along the last axis (rank >= 1; float32 or float64).
ACTORFLOW_API output softmax(output logits, const std::string& name = "");
/// x - log(sum(exp(x))) along the last axis (rank >= 1; float32 or float64).
ACTORFLOW_API output log_softmax(output logits, const std::string& name = "");

/// The two outputs of the cross-entropy ops, as in TensorFlow.
struct ACTORFLOW_API cross_entropy {
  /// [batch]: -sum(labels * log_softmax(logits)) per row.
  output loss;
  /// [batch, classes]: softmax(logits) - labels, the gradient of loss with respect to logits.
  output backprop;
};

/// logits and labels [batch, classes] of one float dtype; each row of labels is a
/// probability distribution.
ACTORFLOW_API cross_entropy softmax_cross_entropy_with_logits(output logits, output labels,
                                                              const std::string& name = "");
/// logits [batch, classes] (float), labels [batch] (int32 or int64) holding class indices in
/// [0, classes); an index out of range fails the run, naming the label and the class count.
ACTORFLOW_API cross_entropy sparse_softmax_cross_entropy_with_logits(output logits, output labels,
                                                                     const std::string& name = "");

}  // namespace actorflow
