// Dynamic batching (TensorFlow Serving's --enable_batching): requests to one
// loaded model become messages to a batcher actor, which joins those of one
// signature and input shape into batches along the first dim, starts each
// batch as a step of the model's session (at most `num_batch_threads` steps
// in flight; no thread waits for one), and when a step ends gives each
// request its rows of the outputs.
//
// A batch closes when it holds max_batch_size rows, when batch_timeout has
// passed since its first request, or at once when no batch is running or
// waiting: an idle server answers without waiting out the timeout
// (TensorFlow Serving waits it always; a request alone then costs it the
// whole timeout), and under load, where a batch is running, the next one
// fills. A batch whose timeout passes while every slot is busy goes on
// filling until a slot frees, rather than queueing as it is: under steady
// load the batches stay large, and so does the capacity of a model whose
// batches cost less per row. A request
// larger than max_batch_size runs as a batch of its own. Batches waiting for a worker are bounded
// by max_enqueued_batches: a request that would form one more is refused with unavailable, so a
// flood queues no unbounded work.
#pragma once
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "actors/serving/export.hpp"
#include "actors/serving/serving_metrics.hpp"
#include "core/export.hpp"

namespace caf {
class actor_system;
}

namespace actorflow {

/// TensorFlow Serving's batching parameters (its --enable_batching flags).
struct ACTORFLOW_API batching_options {
  bool enabled = false;
  /// Rows (the inputs' first dim, summed over the requests) in one batch.
  int64_t max_batch_size = 64;
  /// How long a batch that is not full waits for more requests.
  std::chrono::microseconds batch_timeout{1000};
  /// Batches running at once (each a step of the model's session in flight).
  int num_batch_threads = 4;
  /// Batches formed and waiting for a thread; a request beyond is refused
  /// with unavailable (HTTP 503), so a flood queues no unbounded work.
  int max_enqueued_batches = 64;
  /// A batch runs at once when no batch is running or waiting, rather than
  /// waiting for max_batch_size rows or the timeout (false: it waits, as
  /// TensorFlow Serving's does).
  bool run_when_idle = true;
};

/// Whether signature `sig` can be batched: every input and output has an
/// unknown first dim (the batch), so that requests join and split along it.
bool batchable(const signature_def& sig);

class batcher {
 public:
  batcher(caf::actor_system& system, std::shared_ptr<loaded_model> model,
          const batching_options& options, serving_metrics& metrics);
  /// Stops the actor; requests it still holds fail with cancelled (those
  /// whose steps are in flight are answered when their steps end).
  ~batcher();
  batcher(const batcher&) = delete;
  batcher& operator=(const batcher&) = delete;

  /// A request's outputs, or the exception that failed its batch.
  using answer_fn =
      std::function<void(std::map<std::string, tensor> outputs, std::exception_ptr failure)>;
  /// Queues a request of a batchable signature whose inputs were checked
  /// (loaded_model::check_inputs); `answer` is called once, on a runtime
  /// thread, and must not block.
  void submit(const std::string& signature, std::map<std::string, tensor> inputs, answer_fn answer);

 private:
  struct actors;
  std::unique_ptr<actors> actors_;
};

}  // namespace actorflow
