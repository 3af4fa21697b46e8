// Sampled softmax (Jean et al., 2015; TensorFlow's tf.nn.sampled_softmax_loss): a softmax over
// the true classes and a few sampled ones, with the sampling bias corrected by subtracting the
// log of each class's expected count. Training a language model over a large vocabulary then
// costs per step what the sample costs, not what the vocabulary does.
//
// Ops: log_uniform_candidate_sampler (a primitive, not differentiable); sampled_softmax_loss is
// composed from primitives (gather, matmul, softmax cross entropy), so it has gradients and runs
// on any device: the gradients of weights and biases are the gather adjoint (scatter_add_like),
// which the optimizers apply as row updates, as for embedding_lookup.
//
// Where actorflow deliberately differs from TensorFlow:
// - The sampler is a pure function of (seed, counter, true_classes): it takes an int64 scalar
//   `counter` input (feed the global step), as dropout does, so a run resumed from a checkpoint
//   draws the candidates the uninterrupted run drew. TensorFlow's sampler is stateful, and its
//   draws for a seed differ from ours (another generator: Philox-4x32-10 keyed by the seed).
// - On an accelerator the sampler runs in host memory (op_def::host_kernel): it draws
//   without replacement, one candidate after another, and its outputs are small.
// - true_classes may be int32 as well as int64, and a class outside [0, range_max) is an error
//   (TensorFlow does not check it).
// - sampled_softmax_loss gathers the sampled rows first, then the true ones (TensorFlow: true
//   first), so that both slices have sizes known when the graph is built; the values are the
//   same.
// - The sampled logits are the product plus (bias - log Q + accidental-hit penalty), summed
//   before they meet the product (TensorFlow adds them to it one by one): the same values up to
//   rounding, and one add instead of three on the path from the inputs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/export.hpp"
#include "core/graph.hpp"
#include "ops/embedding.hpp"

namespace actorflow {

/// The three outputs of a candidate sampler, as TensorFlow returns them.
struct ACTORFLOW_API candidate_sample {
  /// int64 [num_sampled]: the sampled classes.
  output sampled_candidates;
  /// float32 [batch, num_true]: how many times each true class is expected among the draws.
  output true_expected_count;
  /// float32 [num_sampled]: the same for each sampled class.
  output sampled_expected_count;
};

/// Samples num_sampled classes from [0, range_max) with the log-uniform (Zipfian) distribution
/// P(k) = (log(k + 2) - log(k + 1)) / log(range_max + 1), as
/// tf.random.log_uniform_candidate_sampler. true_classes: [batch, num_true], int32 or int64.
/// With `unique`, the classes are distinct (drawn by rejection, so num_sampled <= range_max)
/// and an expected count is -expm1(tries * log1p(-P(k))) for the number of draws it took;
/// otherwise num_sampled * P(k). The draws depend only on (seed, counter), counter an int64
/// scalar (e.g. the global step).
ACTORFLOW_API candidate_sample log_uniform_candidate_sampler(output true_classes, int64_t num_true,
                                                             int64_t num_sampled, bool unique,
                                                             int64_t range_max, output counter,
                                                             int64_t seed = 0,
                                                             const std::string& name = "");

struct ACTORFLOW_API sampled_softmax_options {
  /// Labels per example (the columns of labels).
  int64_t num_true = 1;
  /// A sampled class that is also a true class of the row gets the logit -FLT_MAX there (it
  /// would otherwise count as a wrong answer that is right).
  bool remove_accidental_hits = true;
  /// The sampler's seed (unique log-uniform sampling, as TensorFlow's default).
  int64_t seed = 0;
};

/// The sampled softmax loss per example, [batch], as tf.nn.sampled_softmax_loss:
/// weights [num_classes, dim] and biases [num_classes] (float32 or float64), labels
/// [batch, num_true] (int32 or int64), inputs [batch, dim] (batch may be unknown). The
/// candidates come from log_uniform_candidate_sampler(labels, num_true, num_sampled, unique =
/// true, num_classes, counter, seed). Use it for training; evaluate with the full softmax.
ACTORFLOW_API output sampled_softmax_loss(output weights, output biases, output labels,
                                          output inputs, int64_t num_sampled, int64_t num_classes,
                                          output counter,
                                          const sampled_softmax_options& options = {},
                                          const std::string& name = "sampled_softmax_loss");

/// The same with given candidates (TensorFlow's sampled_values argument): any sampler, or fixed
/// ones in tests. num_sampled is the length of sampled.sampled_candidates, which must be known.
ACTORFLOW_API output sampled_softmax_loss(output weights, output biases, output labels,
                                          output inputs, const candidate_sample& sampled,
                                          int64_t num_classes,
                                          const sampled_softmax_options& options = {},
                                          const std::string& name = "sampled_softmax_loss");

/// Both, over weights and biases split by rows over parameter servers
/// (make_partitioned_variable; the same rows and partition strategy): the true
/// and sampled rows are read with embedding_lookup, so only they cross the
/// network, and each shard's gradient is the gather adjoint of its rows (row
/// updates). The values are those of the functions above on the whole
/// weights and biases.
ACTORFLOW_API output sampled_softmax_loss(const partitioned_variable& weights,
                                          const partitioned_variable& biases, output labels,
                                          output inputs, int64_t num_sampled, int64_t num_classes,
                                          output counter,
                                          const sampled_softmax_options& options = {},
                                          const std::string& name = "sampled_softmax_loss");
ACTORFLOW_API output sampled_softmax_loss(const partitioned_variable& weights,
                                          const partitioned_variable& biases, output labels,
                                          output inputs, const candidate_sample& sampled,
                                          int64_t num_classes,
                                          const sampled_softmax_options& options = {},
                                          const std::string& name = "sampled_softmax_loss");

}  // namespace actorflow
