// actorflow-train --model lstm_lm: the LSTM language model (apps/lib/lstm_lm.hpp)
// on Debian's fortunes, trained by truncated BPTT with the same progress bar,
// report, checkpoints and --resume as the image models. Every epoch ends with
// the validation perplexity (full softmax); the last line is
// `valid_ppl=<x> words_per_s=<y>`.
#pragma once
#include <memory>
#include <vector>

#include "actors/cluster/cluster.hpp"
#include "actors/input/fortunes.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "apps/lib/lstm_lm.hpp"
#include "apps/lib/step_observer.hpp"
#include "apps/lib/training_options.hpp"
#include "ops/sync_replicas.hpp"

namespace actorflow::apps {

/// The model's settings from actorflow-train's: --batch is the number of
/// streams, --seed, --lr, --full-softmax, --embedding, --hidden and
/// --vocab-shards as named (--optimizer and --vocab-shards when given, else
/// the defaults); `vocab` from the corpus.
lm::lm_config lm_config_from(const training_options& options, int64_t vocab,
                             const std::string& default_optimizer = "adam",
                             int64_t default_shards = 1);

/// Where an lm_trainer's graph runs: this process (`rt`), or a cluster as
/// worker `worker` of `workers` (between-graph replication: the variables on
/// the ps tasks by replica_device_setter, the rest on this worker).
struct lm_placement {
  std::shared_ptr<runtime> rt;
  std::shared_ptr<cluster_connection> cluster;
  /// The device the model is built on ("/stand_in:0", "/gpu:0"): in one
  /// process all of it; in a cluster this worker's part (its variables are
  /// the ps tasks'). Empty: the runtime's default placement.
  std::string device;
  int num_ps = 0;
  int worker = 0;
  int workers = 1;
  /// Synchronous steps aggregating this many workers' gradients (0: asynchronous).
  int sync_aggregated = 0;
  bool in_cluster() const { return cluster != nullptr; }
};

/// What one training step gave.
struct lm_step {
  float loss = 0;
  /// The global step after it: in synchronous training the token this
  /// worker took (the step its next gradient is computed at).
  int64_t global_step = 0;
};

/// The LM's graphs and session over a corpus, run one global step at a time:
/// actorflow-train's loop and the tests drive the same code.
class lm_trainer {
 public:
  lm_trainer(const lm::lm_config& config, std::vector<int64_t> train_ids,
             std::vector<int64_t> valid_ids, std::shared_ptr<runtime> rt = runtime::shared());
  /// In one process or a cluster. In a cluster `config`'s shard devices and
  /// state prefix are set from the placement, and its vocab_shards when 0
  /// (one per ps task).
  lm_trainer(lm::lm_config config, std::vector<int64_t> train_ids, std::vector<int64_t> valid_ids,
             const lm_placement& placement);
  graph& g() { return graph_; }
  session& sess() { return *session_; }
  const lm::lm_config& config() const { return config_; }
  const lm::lm_variables& vars() const { return vars_; }
  int64_t steps_per_epoch() const { return train_.segments_per_epoch(); }
  int64_t words_per_step() const { return config_.streams * config_.steps; }
  /// Runs global step `step` on its segment and returns the step's loss. The
  /// carried state starts from zero at each epoch's first segment, as the
  /// reference's does; elsewhere it is what the variables hold, so a session
  /// restored from a checkpoint at `step` goes on exactly.
  float run_step(int64_t step);
  /// The same, through `observer` (--trace-steps, --profile).
  float run_step(int64_t step, step_observer& observer);
  /// Runs the step at segment `position` of this trainer's stream (its
  /// carried state reset at each epoch's first segment): a cluster worker's
  /// step, counted by the worker; `trace_step` numbers it for `observer`.
  lm_step run_segment(int64_t position, int64_t trace_step, step_observer& observer);
  /// Perplexity of the full softmax over the validation segments, the state
  /// carried across them from zero (the training state is left alone).
  double validation_perplexity();

  /// The cluster's ops, valid in a cluster only.
  struct cluster_ops {
    operation init;                               ///< the chief's: every shared variable
    output ready;                                 ///< every variable `init` sets is set
    std::vector<variable_initializer> variables;  ///< each with its own initializer
    variable sizes;                               ///< model_sizes() on ps task 0
    std::unique_ptr<sync_replicas_ops> sync;
    output new_local_step;  ///< synchronous: the token worker_train took
    output state_set;       ///< this worker's carried state is set
  };
  const cluster_ops& cluster() const { return cluster_; }
  const lm::lm_training_graph& training_graph() const { return train_graph_; }

 private:
  void build(const lm_placement& placement);

  lm::lm_config config_;
  bptt_batcher train_, valid_;
  graph graph_;
  lm::lm_variables vars_;
  lm::lm_training_graph train_graph_;
  lm::lm_eval_graph eval_graph_;
  cluster_ops cluster_;
  std::unique_ptr<session> session_;
};

/// The corpus with --vocab words (failing when the training text has fewer),
/// cut to --max-train-tokens and --max-valid-tokens.
fortunes_corpus load_lm_corpus(const training_options& options);

/// Trains in this process; returns the exit status.
int train_lstm_lm(const training_options& options);

}  // namespace actorflow::apps
