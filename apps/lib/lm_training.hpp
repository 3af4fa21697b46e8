// actorflow-train --model lstm_lm: the LSTM language model (apps/lib/lstm_lm.hpp)
// on Debian's fortunes, trained by truncated BPTT with the same progress bar,
// report, checkpoints and --resume as the image models. Every epoch ends with
// the validation perplexity (full softmax); the last line is
// `valid_ppl=<x> words_per_s=<y>`.
#pragma once
#include <memory>
#include <vector>

#include "actors/input/fortunes.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "apps/lib/lstm_lm.hpp"
#include "apps/lib/step_observer.hpp"
#include "apps/lib/training_options.hpp"

namespace actorflow::apps {

/// The model's settings from actorflow-train's: --batch is the number of
/// streams, --seed, --lr and --full-softmax as named; `vocab` from the corpus.
lm::lm_config lm_config_from(const training_options& options, int64_t vocab);

/// The LM's graphs and session over a corpus, run one global step at a time:
/// actorflow-train's loop and the tests drive the same code.
class lm_trainer {
 public:
  lm_trainer(const lm::lm_config& config, std::vector<int64_t> train_ids,
             std::vector<int64_t> valid_ids, std::shared_ptr<runtime> rt = runtime::shared());
  graph& g() { return graph_; }
  session& sess() { return session_; }
  const lm::lm_config& config() const { return config_; }
  int64_t steps_per_epoch() const { return train_.segments_per_epoch(); }
  int64_t words_per_step() const { return config_.streams * config_.steps; }
  /// Runs global step `step` on its segment and returns the step's loss. The
  /// carried state starts from zero at each epoch's first segment, as the
  /// reference's does; elsewhere it is what the variables hold, so a session
  /// restored from a checkpoint at `step` goes on exactly.
  float run_step(int64_t step);
  /// The same, through `observer` (--trace-steps, --profile).
  float run_step(int64_t step, step_observer& observer);
  /// Perplexity of the full softmax over the validation segments, the state
  /// carried across them from zero (the training state is left alone).
  double validation_perplexity();

 private:
  lm::lm_config config_;
  bptt_batcher train_, valid_;
  graph graph_;
  lm::lm_variables vars_;
  lm::lm_training_graph train_graph_;
  lm::lm_eval_graph eval_graph_;
  session session_;
};

/// Trains in this process; returns the exit status.
int train_lstm_lm(const training_options& options);

}  // namespace actorflow::apps
