// actorflow-train --logdir: what TensorBoard shows of a run. Every
// --summary-every steps the train loss, learning rate and examples (or
// words) per second, and, where the graph has them, histograms of each
// variable and its gradient (summary ops fetched with that step, as in TF
// 1.x); after each epoch the test accuracy (or validation perplexity); the
// graph once. A log directory that cannot be written, or a disk that fills
// up, is a warning: training goes on without (more) summaries.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "actors/trace/summary_writer.hpp"
#include "ops/train.hpp"

namespace actorflow::apps {

class train_summaries {
 public:
  /// Off when `logdir` is empty.
  train_summaries(const std::string& logdir, int64_t every);
  bool enabled() const { return writer_ != nullptr; }
  /// Histograms of each variable and its gradient and the loss as a scalar;
  /// returns their merged summary (an empty output when off).
  output add_to_graph(graph& g, output loss, const grads_and_vars& pairs);
  /// Whether step n (1-based) writes summaries.
  bool due(int64_t n) const { return enabled() && n % every_ == 0; }
  void write_graph(const graph& g);
  /// Training starts (again) after step n: the rate counts from here.
  void start(int64_t n);
  /// Step n's scalars; `merged` is the fetched merged summary (or empty).
  /// The rate is `units_per_step` (examples, words) per second since the
  /// last call (or start), as train/<unit>_per_s.
  void write_step(int64_t n, const tensor& merged, float loss, double lr, int64_t units_per_step,
                  const std::string& unit);
  void write_eval(int64_t n, const std::string& tag, double value);
  /// Writes what is buffered; says where the files are.
  void finish();

 private:
  void check();  // warns once when the writer recorded an error
  std::unique_ptr<summary_writer> writer_;
  int64_t every_ = 100;
  int64_t last_n_ = 0;
  double last_seconds_ = 0;
  int64_t errors_seen_ = 0;
};

}  // namespace actorflow::apps
