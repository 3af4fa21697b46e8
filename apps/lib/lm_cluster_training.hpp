// actorflow-train --model lstm_lm as a worker of a cluster: the paper's §4.2
// language model across parameter servers. Every worker builds the same graph
// (lm_trainer with an lm_placement): the embedding and the softmax split by
// rows over the ps tasks (--vocab-shards, word i on shard i % N), the LSTM's
// weights and the global step placed round-robin, the rest on the worker.
//
// Each worker trains on its own contiguous share of the corpus (worker w of W
// takes tokens [w n / W, (w + 1) n / W)), cut into --batch streams, with its
// own carried (h, c) state, kept on the ps tasks so that their shards hold it
// and a resumed run goes on exactly. Asynchronous by default; with --sync the
// chief aggregates (ops/sync_replicas.hpp). The chief initializes the
// variables (unless the ps tasks restored them), checks that every worker
// builds the model the ps tasks hold, evaluates the validation perplexity
// after each epoch, writes the report and the summaries, and asks the ps
// tasks to save their shards every --checkpoint-every steps.
#pragma once
#include "apps/lib/cluster_app.hpp"
#include "apps/lib/training_options.hpp"

namespace actorflow::apps {

/// Trains as worker `setup.task`; returns the process's exit status.
int train_lstm_lm_in_cluster(const training_options& options, const cluster_setup& setup);

/// Worker `worker`'s contiguous share of the training tokens `ids`:
/// [worker n / workers, (worker + 1) n / workers).
std::vector<int64_t> worker_share(const std::vector<int64_t>& ids, int worker, int workers);

/// The share of the lookups each of `shards` vocabulary shards serves over
/// `ids` with the mod strategy (word i on shard i % shards), and with
/// contiguous ranges (TensorFlow's div), for the log.
struct shard_loads {
  std::vector<double> mod, contiguous;
};
shard_loads vocabulary_shard_loads(const std::vector<int64_t>& ids, int64_t vocab, int shards);

}  // namespace actorflow::apps
