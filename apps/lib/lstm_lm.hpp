// A word-level LSTM language model, as ../shared/perf-ref/tf_lstm_lm.py builds it
// with Keras: embedding -> one LSTM layer -> projection to the vocabulary, trained
// by truncated BPTT with the recurrent state carried across segments.
//
// Across a cluster (apps/lib/lm_cluster_training.hpp), the embedding and the
// softmax's weights and biases are partitioned over the ps tasks by rows
// (`vocab_shards`), with the `mod` strategy: the vocabulary is sorted by
// frequency (Zipfian), so word i lives on shard i % K and every shard serves
// about the same share of the lookups (contiguous ranges would put the
// frequent words all on shard 0). The sampled softmax then gathers only the
// true and sampled rows from the shards; the full softmax is computed where
// its shards live (sharded_softmax_cross_entropy).
//
// The recurrence lives behind lstm_over_time() alone: a while_loop over the
// segment's time steps whose body is lstm_recurrent_step(), the per-step half
// of the LSTM cell (lstm_cell(), written with graph ops), after the input
// projection that lstm_over_time() does for all steps at once.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "ops/embedding.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"

namespace actorflow::lm {

/// An LSTM's state: output h and cell c, [batch, hidden] each.
struct lstm_state {
  output h;
  output c;
};

/// One step of Keras's LSTMCell (the reference's cell): z = [x, h] @ kernel +
/// bias, split into the gates i, f, g, o (Keras's order); c' = sigmoid(f) * c +
/// sigmoid(i) * tanh(g), h' = sigmoid(o) * tanh(c'). x [batch, E], h and c
/// [batch, H], kernel [E + H, 4H], bias [4H]. Keras adds no forget bias at run
/// time: its initializer sets the forget gate's bias to 1 (lstm_initial_bias).
lstm_state lstm_cell(output x, output h, output c, output kernel, output bias);

/// The recurrent half of lstm_cell: `projected_x` = x @ kernel[:E] + bias
/// [batch, 4H], computed beforehand; recurrent_kernel = kernel[E:] [H, 4H].
/// lstm_over_time projects every step's input at once and runs this per step.
lstm_state lstm_recurrent_step(output projected_x, output h, output c, output recurrent_kernel);

/// The LSTM over a whole sequence.
struct lstm_sequence {
  output outputs;  ///< [T, batch, H]: h after each step
  output h;        ///< final state, [batch, H]
  output c;
};

/// Runs lstm_cell over time: inputs [T, batch, E] (T known), h0 and c0 [batch, H].
lstm_sequence lstm_over_time(output inputs, output h0, output c0, output kernel, output bias);

/// The model's sizes and training settings (the reference's).
struct lm_config {
  int64_t vocab = 10001;  ///< classes: the corpus's words plus <unk>
  int64_t embedding = 256;
  int64_t hidden = 256;
  int64_t steps = 35;         ///< truncated-BPTT segment length
  int64_t streams = 32;       ///< parallel streams (the batch)
  int64_t sampled = 512;      ///< sampled-softmax candidates per step
  bool full_softmax = false;  ///< train with the full softmax instead
  double lr = 1e-3;           ///< the optimizer's learning rate
  double clip_norm = 5;       ///< gradients' global norm is clipped to this
  int64_t seed = 0;
  /// adam (Keras's, epsilon 1e-7), lazy_adam (the same for dense variables;
  /// the embedding's and softmax's rows move only where a batch names them),
  /// adagrad, or any make_optimizer name.
  std::string optimizer = "adam";
  /// The embedding and softmax split by rows into this many shards (mod
  /// strategy); 1 in one process: plain variables (in a cluster, one shard).
  int64_t vocab_shards = 1;
  /// Shard k lives on shard_devices[k % size] (a cluster's ps tasks); empty:
  /// where the enclosing device scope puts it.
  std::vector<std::string> shard_devices;
  /// Non-empty in a cluster: the carried state's variables are
  /// "<state_prefix>/state_h" and "_c", this worker's own, set by reset_state
  /// (not by the chief's initializer).
  std::string state_prefix;
};

/// The model's sizes as one int64 vector [vocab, embedding, hidden,
/// vocab_shards], which a cluster keeps on its first ps task so that every
/// worker (and a resumed run) can check that it builds the same model.
std::vector<int64_t> model_sizes(const lm_config& config);
/// "vocab 10001, embedding 256, hidden 256, 2 vocabulary shards".
std::string describe_sizes(const std::vector<int64_t>& sizes);

/// The trainable variables (Keras's initializers, see lstm_lm.cpp).
struct lm_variables {
  partitioned_variable embedding;  ///< [vocab, E]
  variable kernel;                 ///< [E + H, 4H]: input rows, then recurrent rows
  variable bias;                   ///< [4H]
  partitioned_variable softmax_w;  ///< [vocab, H], as tf.nn.sampled_softmax_loss takes it
  partitioned_variable softmax_b;  ///< [vocab]
  /// The tables are partitioned variables (several shards, or a cluster's
  /// one): read through embedding_lookup and the sharded softmaxes, each
  /// shard's part where the shard lives. Else plain variables, read whole.
  bool sharded = false;
  std::vector<variable> all() const;
};

lm_variables make_lm_variables(graph& g, const lm_config& config);

/// The model from word ids to the hidden states the softmax reads.
struct lm_forward {
  output hidden;  ///< [steps * streams, H], time-major rows
  output labels;  ///< int64 [steps * streams]: targets in the same row order
  lstm_state final_state;
};

/// ids and targets int64 [streams, steps] (as bptt_batcher gives them).
lm_forward run_lm(const lm_variables& vars, output ids, output targets, lstm_state initial);

/// The state after reading `ids` (int64 [batch, steps], the batch may be
/// unknown) from `initial`: the cell unrolled step by step in the graph,
/// keeping no history. For inference (an export); training uses run_lm.
lstm_state read_prefix(const lm_variables& vars, output ids, lstm_state initial);

/// Summed full-softmax negative log-likelihood of the forward's labels.
output full_softmax_nll_sum(const lm_variables& vars, const lm_forward& f);

/// Adds the update of `vars` from `loss` and returns the op that runs it
/// (by default: the optimizer's minimize; sync_replicas' worker step in a
/// synchronous cluster).
using lm_update = std::function<operation(optimizer& opt, output loss, std::vector<variable> vars)>;

/// The config's optimizer, with its clipping.
std::unique_ptr<optimizer> make_lm_optimizer(const lm_config& config);

/// One training step's graph. The state carried between segments lives in two
/// non-trainable variables, so a checkpoint holds it and --resume continues
/// exactly; `train` updates the weights, the state and the global step.
struct lm_training_graph {
  output inputs, targets;  ///< int64 placeholders [streams, steps]
  variable state_h, state_c;
  output loss;  ///< mean loss per word of the step (sampled or full softmax)
  operation train;
  operation reset_state;  ///< zeroes the carried state: run it at each epoch's start
};

lm_training_graph make_training_graph(graph& g, const lm_variables& vars, const lm_config& config,
                                      const lm_update& update = {});

/// The validation graph on the same variables: the state is fed and fetched,
/// so validation never disturbs the training state.
struct lm_eval_graph {
  output inputs, targets, h0, c0;  ///< placeholders
  output nll_sum;                  ///< summed over the segment's words
  lstm_state final_state;
};

lm_eval_graph make_eval_graph(graph& g, const lm_variables& vars, const lm_config& config);

}  // namespace actorflow::lm
