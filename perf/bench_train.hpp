// Training-step benchmarks: one full Adam step of the Fashion-MNIST models,
// and the PyTorch reference script run in the same process's lifetime.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "core/tensor.hpp"

namespace actorflow::bench {

/// A Fashion-MNIST-shaped batch of random pixels (float32, (batch,28,28,1))
/// and labels (int32): a step's cost does not depend on the values.
std::pair<tensor, tensor> random_fmnist_batch(int batch);

/// A Fashion-MNIST model's Adam step ("mlp" or "cnn") on a random batch
/// already in memory. `extend` may add nodes to the graph (after the model,
/// before the session is made and the variables initialized).
struct fmnist_step {
  graph g;
  output loss;
  operation train;
  std::unique_ptr<session> s;
  feed_list feeds;
  fmnist_step(const std::string& model, int batch, const std::vector<std::string>& devices,
              models::precision p = models::precision::fp32, session_options options = {},
              const std::function<void(graph&)>& extend = {});
  /// One step; fetches the loss every step, as the reference does.
  void run(const run_options& options = {});
};

/// Milliseconds of one training step (forward, backward, Adam update) of
/// `model` ("mlp" or "cnn") at `batch`, with the batch already in memory:
/// the median of five blocks of steps / 5 steps each.
/// With `devices` (e.g. {"/gpu:0"}), the model's layers run there
/// (models::make_classifier), in the process-wide runtime; `p`: the products' precision;
/// `options`: the session's (optimize = false: the graph as built).
double train_step_ms(const std::string& model, int batch, int steps,
                     const std::vector<std::string>& devices = {},
                     models::precision p = models::precision::fp32, session_options options = {});

/// The cost of timelines: the MLP's training step untraced and traced
/// (run_options{.trace = true}), in one session, in alternating blocks of
/// `steps` / 5 so that both see the same machine. {plain ms, traced ms}.
std::pair<double, double> traced_step_ms(int batch, int steps);

/// The reference torch_fmnist.py's step_ms for the same model (the median of
/// three runs), when it is in bench::reference_dir() and python3-torch and
/// the dataset are installed.
std::optional<double> torch_train_step_ms(const std::string& model, int batch, int steps);

/// PyTorch's step on the GPU (perf/torch_gpu_fmnist.py, run by torch_python()):
/// the same model and batch, fed from host memory, the loss read back each step.
std::optional<double> torch_gpu_step_ms(const std::string& model, int batch, int steps);

/// Milliseconds of one AdaGrad step through embedding_lookup on a table of
/// `rows` x `cols` float32 split in 4 shards, `batch` random ids per step:
/// with the optimizer's row updates, or (`by_rows` false) the dense update
/// every shard gets without them. The median of five blocks of `steps` / 5.
double embedding_step_ms(bool by_rows, int64_t rows, int64_t cols, int batch, int steps);

/// The same table trained synchronously (sync_replicas) by two replicas in
/// one process, `batch` ids each: milliseconds per synchronous step (both
/// replicas' gradients, the chief's average and update). `by_rows`: sparse
/// accumulators and row updates; false: dense accumulators and updates.
double sync_embedding_step_ms(bool by_rows, int64_t rows, int64_t cols, int batch, int steps);

/// Training words per second of the LSTM language model (apps/lib/lm_training.hpp)
/// on Debian's fortunes: `steps` global steps after a few warm-up ones, sampled
/// or full softmax. Throws `[fortunes] ...` when the package is missing. With a
/// `device` ("/gpu:0"), the whole model there, on 10001-word Zipfian random
/// text (a GPU machine need not have the corpus; the throughput is the same).
double lstm_lm_words_per_s(bool full_softmax, int steps, const std::string& device = "");

}  // namespace actorflow::bench
