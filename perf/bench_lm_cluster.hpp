// The language model across parameter servers (`actorflow-bench --only
// lm_cluster`): the paper's §6.4 shape on loopback. One worker (this
// process) trains apps/lib/lm_training.hpp's LSTM LM with its embedding and
// softmax split over 1, 2 and 4 actorflow-node ps tasks, sampled and full
// softmax, at vocabularies of 10,000 and 30,945 words (every distinct word of
// fortunes), beside the same model in one process in the same run. Each
// shape reports words/s and the bytes the worker sent and received per step
// (every byte of the cluster crosses its connections), beside the analytical
// floor: what a system that moves only the dense LSTM weights, the state and
// the rows a step names (ids, rows and their gradients; the full softmax's
// hidden states and per-example scalars instead of rows) must move.
//
// Beside them, TensorFlow's own distributed LM (perf/tf_lm_cluster.py:
// replica_device_setter, fixed_size_partitioner, sampled_softmax_loss over
// the partitioned weights) on the same shapes, where TensorFlow is importable;
// and one epoch of 1 worker and 2 ps tasks with sampled softmax by both, for
// the validation perplexity.
#pragma once
#include <string>
#include <vector>

namespace actorflow::bench {

struct lm_cluster_row {
  std::string key;
  double value;
  std::string unit;
  std::string note;
};

struct lm_cluster_figures {
  std::vector<lm_cluster_row> rows;
  /// What could not be measured, one line each.
  std::vector<std::string> errors;
};

/// Runs the group; never throws. `epoch`: also train one whole epoch (1
/// worker, 2 ps tasks, sampled softmax) for the validation perplexity.
lm_cluster_figures lm_cluster_benchmarks(bool epoch = true);

}  // namespace actorflow::bench
