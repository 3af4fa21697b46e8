// actorflow-train --model lstm_lm: the LSTM language model (apps/lib/lstm_lm.hpp)
// on Debian's fortunes, trained by truncated BPTT with the same progress bar,
// report, checkpoints and --resume as the image models. Every epoch ends with
// the validation perplexity (full softmax); the last line is
// `valid_ppl=<x> words_per_s=<y>`.
#pragma once
#include "apps/lib/lstm_lm.hpp"
#include "apps/lib/training_options.hpp"

namespace actorflow::apps {

/// The model's settings from actorflow-train's: --batch is the number of
/// streams, --seed, --lr and --full-softmax as named; `vocab` from the corpus.
lm::lm_config lm_config_from(const training_options& options, int64_t vocab);

/// Trains in this process; returns the exit status.
int train_lstm_lm(const training_options& options);

}  // namespace actorflow::apps
