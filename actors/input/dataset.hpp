// An in-memory dataset: a few tensors that share their first dimension (the
// example index), e.g. images [N,28,28,1] and labels [N], cut into batches.
// Each epoch visits the examples in its own order, a permutation that depends
// only on (seed, epoch): training that resumes at a position sees exactly the
// batches it would have seen had it never stopped.
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "core/export.hpp"
#include "core/tensor.hpp"

namespace actorflow {

struct ACTORFLOW_API dataset_options {
  int64_t batch_size = 128;
  uint64_t seed = 0;
  /// Visit each epoch in a new random order (off: the stored order).
  bool shuffle = true;
  /// Drop the last, smaller batch of an epoch (as the PyTorch reference,
  /// ../shared/perf-ref/torch_fmnist.py, does); off: it comes as a short batch.
  bool drop_remainder = true;
};

/// Batch `batch` of epoch `epoch`.
struct ACTORFLOW_API dataset_position {
  int64_t epoch = 0;
  int64_t batch = 0;
  friend bool operator==(const dataset_position& a, const dataset_position& b) {
    return a.epoch == b.epoch && a.batch == b.batch;
  }
};

class ACTORFLOW_API dataset {
 public:
  /// `components` share their first dimension; throws actorflow::error when
  /// they do not, or when an epoch would hold no batch.
  dataset(std::vector<tensor> components, dataset_options options);
  dataset(const dataset&) = delete;
  dataset& operator=(const dataset&) = delete;

  int64_t num_examples() const { return num_examples_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const dataset_options& options() const { return options_; }
  const std::vector<tensor>& components() const { return components_; }

  /// What a batch holds, for fifo_queue: component i is [batch_size, ...]
  /// (first dim unknown, -1, when short last batches are kept).
  std::vector<dtype> batch_types() const;
  std::vector<shape> batch_shapes() const;

  /// The example order of `epoch`: a permutation of 0..N-1 that depends only
  /// on (seed, epoch); the identity without shuffling.
  std::vector<int64_t> order(int64_t epoch) const;
  /// The batch at `pos`, one tensor per component (rows copied in the
  /// epoch's order). Safe to call from several threads.
  std::vector<tensor> batch(dataset_position pos) const;

  /// The position after `pos` (the next epoch's first batch after the last).
  dataset_position next(dataset_position pos) const;
  /// The position of global step `step`, counting one batch per step from
  /// epoch 0: where training resumes from a checkpoint taken at that step.
  dataset_position position_at_step(int64_t step) const;
  /// The inverse of position_at_step.
  int64_t step_at(dataset_position pos) const;

 private:
  void check_position(dataset_position pos) const;
  std::shared_ptr<const std::vector<int64_t>> order_cached(int64_t epoch) const;

  std::vector<tensor> components_;
  dataset_options options_;
  int64_t num_examples_ = 0;
  int64_t batches_per_epoch_ = 0;
  std::vector<size_t> row_bytes_;  // bytes of one example, per component
  // The order of the epoch last asked for: a reader asks for the same epoch
  // hundreds of times in a row, and a permutation of 60000 costs ~0.5 ms.
  mutable std::mutex mutex_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::shared_ptr<const std::vector<int64_t>> cached_order_;
};

}  // namespace actorflow
